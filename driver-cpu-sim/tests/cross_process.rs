//! Ranks of one channel in two processes: this test binary runs again as the second process
//! (`child_process`, see `support/child_process.rs`) and the two meet through the socket of the
//! process that made the id. Every wait is bounded, so a bug fails instead of
//! hanging.

#[path = "support/child_process.rs"]
#[allow(dead_code)] // Each test binary uses its own part.
mod child_process;

use std::time::{Duration, Instant};

use child_process::{ChildProcess, LIMIT, given_id, say};
use hal::{
    BufferParams, Channel, ChannelId, CollectiveArgs, CollectiveOp, Device, ElementType, Error, ReduceOp,
    SemaphoreValue as SV, StatusCode, Timeout,
};

const T: Timeout = Timeout::After(LIMIT);

fn device() -> Device {
    driver_cpu_sim::create_device().expect("cpu-sim device")
}

/// Submits `args` on `channel` after `waits` and returns the semaphore it signals to 1.
fn submit(device: &Device, channel: &Channel, waits: &[SV], args: CollectiveArgs) -> hal::Semaphore {
    let done = device.create_semaphore(0).unwrap();
    device.queue(0).unwrap().collective(waits, channel, args, &[SV::new(&done, 1)]).unwrap();
    done
}

fn floats(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// One rank's side of the collectives scenario: each rank checks what it must receive.
fn collectives_as(rank: usize, id: &ChannelId) {
    let device = device();
    let channel = device.create_channel(id, rank, 2).unwrap();
    let buffer = |bytes: u64| device.allocate_buffer(BufferParams::host_visible(), bytes).unwrap();

    // All-reduce (sum): rank r holds r + 1 + i.
    let sums = buffer(32);
    sums.write_values(0, &(0..8).map(|i| (rank + 1 + i) as f32).collect::<Vec<_>>()).unwrap();
    let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, 8).send(&sums).recv(&sums);
    submit(&device, &channel, &[], args).wait(1, T).unwrap();
    assert_eq!(sums.read_to_vec().unwrap(), floats(&(0..8).map(|i| (3 + 2 * i) as f32).collect::<Vec<_>>()));

    // All-gather: rank r sends 10r + i; everyone gets both in rank order.
    let (mine, all) = (buffer(16), buffer(32));
    mine.write_values(0, &(0..4).map(|i| 10 * rank as i32 + i).collect::<Vec<_>>()).unwrap();
    let args = CollectiveArgs::new(CollectiveOp::AllGather, ElementType::I32, 4).send(&mine).recv(&all);
    submit(&device, &channel, &[], args).wait(1, T).unwrap();
    let mut gathered = [0i32; 8];
    all.read_values(0, &mut gathered).unwrap();
    assert_eq!(gathered, [0, 1, 2, 3, 10, 11, 12, 13]);

    // Broadcast from rank 1 (the rank in the other process is the root).
    let shared = buffer(8);
    if rank == 1 {
        shared.write_values(0, &[2.5f64]).unwrap();
    }
    let mut args = CollectiveArgs::new(CollectiveOp::Broadcast { root: 1 }, ElementType::F64, 1).recv(&shared);
    if rank == 1 {
        args = args.send(&shared);
    }
    submit(&device, &channel, &[], args).wait(1, T).unwrap();
    let mut value = [0f64];
    shared.read_values(0, &mut value).unwrap();
    assert_eq!(value, [2.5]);

    // Send and receive, both ways: rank 0 sends 7s, rank 1 sends back 9s.
    let peer = 1 - rank;
    for sender in [0, 1] {
        let data = buffer(12);
        let args = if rank == sender {
            data.write_values(0, &[7 + 2 * sender as u32; 3]).unwrap();
            CollectiveArgs::new(CollectiveOp::Send { peer }, ElementType::U32, 3).send(&data)
        } else {
            CollectiveArgs::new(CollectiveOp::Recv { peer }, ElementType::U32, 3).recv(&data)
        };
        submit(&device, &channel, &[], args).wait(1, T).unwrap();
        let mut got = [0u32; 3];
        data.read_values(0, &mut got).unwrap();
        assert_eq!(got, [7 + 2 * sender as u32; 3], "rank {rank}, sent by rank {sender}");
    }

    let barrier = CollectiveArgs::new(CollectiveOp::Barrier, ElementType::U8, 0);
    submit(&device, &channel, &[], barrier).wait(1, T).unwrap();
}

/// A one-element all-reduce on `channel` after `waits`.
fn all_reduce(device: &Device, channel: &Channel, waits: &[SV]) -> hal::Semaphore {
    let data = device.allocate_buffer(BufferParams::host_visible(), 4).unwrap();
    let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::F32, 1).send(&data).recv(&data);
    submit(device, channel, waits, args)
}

/// Collective 0 waits on a gate that rank 1 fails; collective 1 on one that rank 0 fails. Each rank
/// checks that the other's failure reached it.
fn failed_waits_as(rank: usize, id: &ChannelId) {
    let device = device();
    let channel = device.create_channel(id, rank, 2).unwrap();
    let gate = device.create_semaphore(0).unwrap();
    let mut outcomes = Vec::new();
    for failing in [1, 0] {
        let waits = if rank == failing { vec![SV::new(&gate, 1)] } else { Vec::new() };
        outcomes.push((failing, all_reduce(&device, &channel, &waits)));
        if rank == failing {
            gate.fail(Error::aborted(format!("rank {rank}'s gate failed")));
        }
    }
    for (failing, done) in outcomes {
        let status = done.wait(1, T).expect_err("the collective fails on every rank");
        assert_eq!(status.code(), StatusCode::Aborted, "{status}");
        assert!(status.message().contains(&format!("rank {failing}'s gate failed")), "{status}");
    }
}

/// The entry point of the child process: a scenario picked by the parent, or nothing at all.
#[test]
fn child_process() {
    let Some(scenario) = child_process::scenario() else { return };
    let id = given_id;
    match scenario.as_str() {
        "collectives" => collectives_as(1, &id()),
        "failed waits" => failed_waits_as(1, &id()),
        "submit then linger" => {
            let device = device();
            let channel = device.create_channel(&id(), 1, 2).unwrap();
            let _done = all_reduce(&device, &channel, &[]);
            // Long enough for the part to reach the host; then wait to be killed.
            std::thread::sleep(Duration::from_millis(200));
            say("submitted");
            std::thread::sleep(LIMIT * 2);
        }
        "host then linger" => {
            let device = device();
            let id = device.create_channel_id().unwrap();
            let _channel = device.create_channel(&id, 0, 2).unwrap();
            say(&id.to_hex());
            std::thread::sleep(LIMIT * 2);
        }
        "host collectives then exit" => {
            let id = device().create_channel_id().unwrap();
            say(&id.to_hex());
            collectives_as(0, &id);
        }
        "host then exit" => say(&device().create_channel_id().unwrap().to_hex()),
        "join then drop its channel" => {
            let device = device();
            drop(device.create_channel(&id(), 1, 2).unwrap());
            say("left");
            std::thread::sleep(LIMIT * 2);
        }
        "join then drop its device" => {
            let device = device();
            let _channel = device.create_channel(&id(), 1, 2).unwrap();
            drop(device);
            say("left");
            std::thread::sleep(LIMIT * 2);
        }
        "host then drop its channel" => {
            let device = device();
            let id = device.create_channel_id().unwrap();
            let channel = device.create_channel(&id, 0, 2).unwrap();
            say(&id.to_hex());
            // Long enough, most runs, for the other rank's collectives to reach this process.
            std::thread::sleep(Duration::from_millis(300));
            drop(channel);
            say("left");
            std::thread::sleep(LIMIT * 2);
        }
        other => panic!("no scenario {other:?}"),
    }
}

#[test]
fn collectives_meet_across_two_processes() {
    let device = device();
    let id = device.create_channel_id().unwrap();
    let child = ChildProcess::spawn("collectives", Some(&id));
    drop(device);
    collectives_as(0, &id);
    child.succeeds();
}

#[test]
fn the_host_process_exiting_after_its_last_collective_still_delivers_the_others_results() {
    let child = ChildProcess::spawn("host collectives then exit", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    collectives_as(1, &id);
    child.succeeds();
}

#[test]
fn a_failed_wait_in_one_process_fails_the_collective_in_the_other() {
    let id = device().create_channel_id().unwrap();
    let child = ChildProcess::spawn("failed waits", Some(&id));
    failed_waits_as(0, &id);
    child.succeeds();
}

#[test]
fn a_rank_whose_process_died_fails_the_hosts_rank_instead_of_hanging() {
    let device = device();
    let id = device.create_channel_id().unwrap();
    let channel = device.create_channel(&id, 0, 2).unwrap();
    let mut child = ChildProcess::spawn("submit then linger", Some(&id));
    assert_eq!(child.hear(), "submitted");
    child.kill();
    // The host sees the connection close at once (the child is reaped); give its thread time to.
    std::thread::sleep(Duration::from_millis(200));
    // The child's part of the first arrived before it died, but its result has nowhere to go; the
    // second it never reaches.
    for done in [all_reduce(&device, &channel, &[]), all_reduce(&device, &channel, &[])] {
        let status = done.wait(1, T).expect_err("the peer's process died");
        assert_eq!(status.code(), StatusCode::Unavailable, "{status}");
        assert!(status.message().contains("rank 1's process went away"), "{status}");
    }
}

#[test]
fn a_rank_whose_host_process_died_gets_unavailable_naming_the_channel() {
    let mut child = ChildProcess::spawn("host then linger", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    let device = device();
    let channel = device.create_channel(&id, 1, 2).unwrap();
    child.kill();
    let status = all_reduce(&device, &channel, &[]).wait(1, T).expect_err("the host's process died");
    assert_eq!(status.code(), StatusCode::Unavailable, "{status}");
    assert!(status.message().contains(&format!("{id:?}")), "{status}");
}

#[test]
fn joining_an_id_whose_process_exited_is_unavailable_at_once() {
    let child = ChildProcess::spawn("host then exit", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    child.succeeds();
    let started = Instant::now();
    let refused = device().create_channel(&id, 1, 2).expect_err("nobody holds the channel");
    assert_eq!(refused.code(), StatusCode::Unavailable, "{refused}");
    assert!(refused.message().contains("nobody listens"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(5), "refused without waiting out a deadline");
}

#[test]
fn a_join_refused_by_the_host_comes_back_with_its_code() {
    let mut child = ChildProcess::spawn("host then linger", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    let taken = device().create_channel(&id, 0, 2).expect_err("the host process holds rank 0");
    assert_eq!(taken.code(), StatusCode::FailedPrecondition, "{taken}");
    let count = device().create_channel(&id, 1, 3).expect_err("the channel has 2 ranks");
    assert_eq!(count.code(), StatusCode::InvalidArgument, "{count}");
    child.kill();
}

/// Rank 1, in a child process that stays alive, joins and leaves as `scenario` says without
/// submitting: the all-reduce rank 0 submitted before rank 1 even joined (legal: a peer may come
/// later) fails, and so does the next, `Unavailable` naming rank 1 as having left.
fn a_rank_of_another_process_that_leaves(scenario: &str) {
    let device = device();
    let id = device.create_channel_id().unwrap();
    let channel = device.create_channel(&id, 0, 2).unwrap();
    let first = all_reduce(&device, &channel, &[]);
    let mut child = ChildProcess::spawn(scenario, Some(&id));
    assert_eq!(child.hear(), "left");
    for done in [first, all_reduce(&device, &channel, &[])] {
        let status = done.wait(1, T).expect_err("rank 1 left the channel");
        assert_eq!(status.code(), StatusCode::Unavailable, "{status}");
        assert!(status.message().contains("rank 1 left"), "{status}");
    }
    assert!(child.runs(), "the child left the channel, its process did not exit");
}

#[test]
fn a_rank_of_another_process_that_drops_its_channel_fails_the_collectives_waiting_for_it() {
    a_rank_of_another_process_that_leaves("join then drop its channel");
}

#[test]
fn a_rank_of_another_process_whose_device_drops_fails_the_collectives_waiting_for_it() {
    a_rank_of_another_process_that_leaves("join then drop its device");
}

#[test]
fn the_host_processs_rank_that_drops_its_channel_fails_the_collectives_of_ranks_elsewhere() {
    let child = ChildProcess::spawn("host then drop its channel", None);
    let id = ChannelId::from_hex(&child.hear()).unwrap();
    let device = device();
    let channel = device.create_channel(&id, 1, 2).unwrap();
    let pending = [all_reduce(&device, &channel, &[]), all_reduce(&device, &channel, &[])];
    assert_eq!(child.hear(), "left");
    for done in pending.into_iter().chain([all_reduce(&device, &channel, &[])]) {
        let status = done.wait(1, T).expect_err("rank 0 left the channel");
        assert_eq!(status.code(), StatusCode::Unavailable, "{status}");
        assert!(status.message().contains("rank 0 left"), "{status}");
    }
}
