//! Who may join a channel through the socket of the process that made its id (Linux), and what a
//! connection costs that host before it shows the id: only a process of the same user that shows
//! the whole id joins; a stranger's connection is closed by a deadline or at once, and only a few
//! at a time get a thread. Some tests talk to the socket directly, as a stranger would.

#[path = "support/child_process.rs"]
#[allow(dead_code)] // Each test binary uses its own part.
mod child_process;

use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use child_process::{ChildProcess, LIMIT, given_id, say};
use hal::{ChannelId, Device, StatusCode};

/// How long the host gives a connection to send its join (`collective::host::JOIN_WITHIN`).
const JOIN_WITHIN: Duration = Duration::from_secs(2);
/// How many connections yet to join get a thread at once (`collective::host::MAX_UNPROVEN`).
const MAX_UNPROVEN: usize = 8;

fn device() -> Device {
    driver_cpu_sim::create_device().expect("cpu-sim device")
}

/// A connection to the socket of the process that made `id`, as any process could open.
fn connect(id: &ChannelId) -> UnixStream {
    let name = driver_cpu_sim::host_socket_name(id).expect("an id cpu-sim made");
    let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("a socket name");
    let stream = UnixStream::connect_addr(&address).expect("connect to the host");
    stream.set_write_timeout(Some(LIMIT)).unwrap();
    stream
}

/// The frame a rank sends to join `id` as rank 1 of 2 (`collective/wire.rs`): the payload's length,
/// then the join's tag, the id with its length, the rank and the count.
fn join_frame(id: &ChannelId) -> Vec<u8> {
    let mut payload = vec![0u8];
    payload.extend_from_slice(&(ChannelId::LEN as u64).to_le_bytes());
    payload.extend_from_slice(id.as_bytes());
    payload.extend_from_slice(&1u64.to_le_bytes());
    payload.extend_from_slice(&2u64.to_le_bytes());
    let mut frame = (payload.len() as u64).to_le_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

/// The threads of process `pid`.
fn threads_of(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the child's status");
    let line = status.lines().find_map(|l| l.strip_prefix("Threads:")).expect("a thread count");
    line.trim().parse().expect("a number")
}

/// The entry point of the child process: a scenario picked by the parent, or nothing at all.
#[test]
fn child_process() {
    let Some(scenario) = child_process::scenario() else { return };
    match scenario.as_str() {
        "host then linger" => {
            let device = device();
            say(&device.create_channel_id().unwrap().to_hex());
            std::thread::sleep(LIMIT * 2);
        }
        "join as rank 1" => match device().create_channel(&given_id(), 1, 2) {
            Ok(_) => say("joined"),
            Err(e) => say(&format!("{}: {}", e.code().as_str(), e.message())),
        },
        other => panic!("no scenario {other:?}"),
    }
}

#[test]
fn a_join_with_an_id_its_maker_did_not_write_is_refused() {
    let child = ChildProcess::spawn("host then linger", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    // The pid and nonce are public (the socket's name); the rest is the secret.
    let mut forged = *id.as_bytes();
    forged[ChannelId::LEN - 1] ^= 1;
    let forged = ChannelId::from_bytes(&forged).unwrap();
    let refused = device().create_channel(&forged, 1, 2).expect_err("a forged id joins nothing");
    assert_eq!(refused.code(), StatusCode::PermissionDenied, "{refused}");
    assert!(refused.message().contains("did not make channel"), "{refused}");
    device().create_channel(&id, 1, 2).expect("the id as its maker wrote it joins");
}

#[test]
fn a_connection_that_trickles_its_join_is_closed_by_the_join_deadline() {
    let id = device().create_channel_id().unwrap();
    let mut stream = connect(&id);
    let started = Instant::now();
    // A byte at a time, each well within any per-read timeout: only a deadline for the whole
    // join closes it.
    let closed = join_frame(&id).iter().any(|byte| {
        std::thread::sleep(Duration::from_millis(150));
        stream.write_all(&[*byte]).is_err()
    });
    let took = started.elapsed();
    assert!(closed, "the host waited {took:?} for a join sent a byte at a time");
    assert!(took < JOIN_WITHIN + Duration::from_secs(3), "closed only after {took:?}");
}

#[test]
fn a_frame_longer_than_a_join_is_refused_before_its_bytes_are_taken() {
    let id = device().create_channel_id().unwrap();
    let mut stream = connect(&id);
    stream.write_all(&(1u64 << 40).to_le_bytes()).unwrap();
    let chunk = vec![0u8; 1 << 16];
    let mut written = 0usize;
    while written < 64 << 20 {
        match stream.write(&chunk) {
            Ok(n) => written += n,
            Err(_) => break,
        }
    }
    // What a refusal leaves taken is the socket's buffer, a few hundred KiB at most.
    assert!(written < 16 << 20, "the host took {written} bytes of a frame announcing 1 TiB before any join");
}

#[test]
fn connections_yet_to_join_cost_the_host_a_bounded_number_of_threads() {
    let child = ChildProcess::spawn("host then linger", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    let before = threads_of(child.pid());
    let silent: Vec<UnixStream> = (0..5 * MAX_UNPROVEN).map(|_| connect(&id)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let during = threads_of(child.pid());
    assert!(
        during <= before + MAX_UNPROVEN,
        "{before} threads before {} silent connections, {during} with them",
        silent.len()
    );
    // A rank showing the id still joins: once the silent connections' deadline closed them.
    let started = Instant::now();
    device().create_channel(&id, 1, 2).expect("a join while silent connections hold the host's places");
    assert!(started.elapsed() < JOIN_WITHIN + Duration::from_secs(5), "joined after {:?}", started.elapsed());
}

#[test]
fn a_process_of_another_user_may_not_join() {
    // The kernel owns /proc/self by this process's effective user.
    let not_run = |reason: &str| eprintln!("not run: a_process_of_another_user_may_not_join: {reason}");
    if std::fs::metadata("/proc/self").unwrap().uid() != 0 {
        return not_run("starting a process of another user needs root");
    }
    let nobody = 65534;
    // A checkout under a directory only its owner may enter (or a target directory there) keeps
    // the other user from starting this binary at all.
    let exe = child_process::test_binary();
    if let Some(reason) = child_process::not_executable_by(&exe, nobody, nobody) {
        return not_run(&format!("the test binary cannot be started as user {nobody}: {reason}"));
    }
    let device = device();
    let id = device.create_channel_id().unwrap();
    let _rank_0 = device.create_channel(&id, 0, 2).unwrap();
    let spawned = ChildProcess::try_spawn_with("join as rank 1", Some(&id), |command| {
        command.uid(nobody).gid(nobody);
    });
    let child = match spawned {
        Ok(child) => child,
        // What the mode bits do not show (an ACL, a mount option) still refuses the exec.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return not_run(&format!("the test binary {} cannot be started as user {nobody}: {e}", exe.display()));
        }
        Err(e) => panic!("spawn the child process as user {nobody}: {e}"),
    };
    let said = child.hear();
    assert!(said.starts_with("PERMISSION_DENIED: "), "{said}");
    assert!(said.contains(&format!("of user {nobody}")), "{said}");
    child.succeeds();
}
