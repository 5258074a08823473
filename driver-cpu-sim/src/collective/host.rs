//! Holding this process's channel meetings for ranks in other processes on the same host (Linux),
//! as NCCL's bootstrap root does: the first id made in a process starts one listener on an abstract
//! Unix socket named from the pid and the process's nonce (no file to clean up; it goes with the
//! process). Each connection is one rank of another process: its thread joins the channel for it,
//! and takes part in each meeting with the bytes the rank sent, replying with its result. When the
//! rank leaves, or its connection closes without it leaving (its process died), every meeting the
//! rank is missing from fails for the other ranks, naming it.
//!
//! Anyone on the host can see the socket (abstract sockets are listed in `/proc/net/unix` and have
//! no file permissions), so a connection must earn what it costs: one of another user is refused
//! at once (`peer.rs`); the others get a thread each, but at most
//! [`MAX_UNPROVEN`] at once until they show an id this process made, which they must send within
//! [`JOIN_WITHIN`] in one frame no longer than a join. Only then does the rank join.

use std::collections::HashSet;
use std::io::Read;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hal::{ChannelId, Error};

use super::wire::{JOIN_LENGTH, Message, read_message, read_message_within, write_message};
use super::{LocalRank, Part, RemotePart, made_here, process_nonce};
use hal::driver::lock;

/// Connections that have not yet shown an id this process made, at most, at once: another is
/// closed as soon as it is accepted (a joining rank then tries again).
pub(crate) const MAX_UNPROVEN: usize = 8;

/// How long a new connection has to send its join, however its bytes trickle in.
pub(crate) const JOIN_WITHIN: Duration = Duration::from_secs(2);

/// The abstract socket name of the process `pid` with `nonce`.
pub(crate) fn socket_name(pid: u32, nonce: u64) -> String {
    format!("timeline-hal-cpu-sim/{pid}/{nonce:016x}")
}

/// The socket address of `name`.
pub(crate) fn socket_address(name: &str) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(name.as_bytes())
}

/// Starts this process's listener (once). If it cannot, the ids it makes still work within this
/// process; a rank elsewhere then gets `Unavailable` when it joins.
pub(crate) fn listen() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let name = socket_name(std::process::id(), process_nonce());
        let listener = socket_address(&name).and_then(|address| UnixListener::bind_addr(&address));
        let spawned = listener.and_then(|listener| {
            std::thread::Builder::new().name("cpu-sim-channel-host".into()).spawn(move || accept(listener))
        });
        if let Err(e) = spawned {
            tracing::warn!("cpu-sim: cannot listen at @{name} for ranks in other processes: {e}");
        }
    });
}

fn accept(listener: UnixListener) {
    let unproven = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!("cpu-sim: accepting a rank of another process: {e}");
                continue;
            }
        };
        let admitted = super::peer::of_peer(&stream)
            .map_err(|e| Error::unavailable(format!("cpu-sim: the peer's credentials are unknown: {e}")))
            .and_then(super::peer::admit);
        if let Err(refused) = admitted {
            tracing::warn!("cpu-sim: refused a connection to the channel socket: {refused}");
            // Told why (a reply this small never blocks), then closed.
            let _ = write_message(&mut &stream, &Message::Joined(Err(refused)));
            continue;
        }
        let Some(place) = Unproven::take(&unproven) else {
            tracing::debug!("cpu-sim: {MAX_UNPROVEN} connections have yet to join; closing one more");
            continue;
        };
        let serving =
            std::thread::Builder::new().name("cpu-sim-channel-rank".into()).spawn(move || serve(stream, place));
        if let Err(e) = serving {
            tracing::warn!("cpu-sim: cannot serve a rank of another process: {e}");
        }
    }
}

/// A place among the [`MAX_UNPROVEN`] connections yet to join; given back on drop.
struct Unproven(Arc<AtomicUsize>);

impl Unproven {
    fn take(count: &Arc<AtomicUsize>) -> Option<Unproven> {
        let taken = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_UNPROVEN).then_some(n + 1));
        taken.ok().map(|_| Unproven(count.clone()))
    }
}

impl Drop for Unproven {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads `stream` until `deadline`, however the bytes trickle in (a read timeout alone restarts with
/// every byte).
struct ReadBy<'a> {
    stream: &'a UnixStream,
    deadline: Instant,
}

impl Read for ReadBy<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no join in time"));
        }
        self.stream.set_read_timeout(Some(left))?;
        (&mut &*self.stream).read(buffer)
    }
}

/// The join a new connection sends: read within [`JOIN_WITHIN`], no longer than a join, for an id
/// this process made. `None`: the connection is dropped unanswered (it sent nothing useful in
/// time); `Some(Err)`: it is told why it may not join.
fn first_join(stream: &UnixStream) -> Option<(ChannelId, u64, u64, hal::Result<()>)> {
    let mut by = ReadBy { stream, deadline: Instant::now() + JOIN_WITHIN };
    let Ok(Message::Join { id, rank, count }) = read_message_within(&mut by, JOIN_LENGTH) else { return None };
    stream.set_read_timeout(None).ok()?;
    let proven = if made_here(&id) {
        Ok(())
    } else {
        Err(Error::permission_denied(format!(
            "cpu-sim: process {} did not make channel {id:?} (an id is joined whole, as its maker wrote it)",
            std::process::id()
        )))
    };
    Some((id, rank, count, proven))
}

/// One rank of another process, as its connection's threads see it.
struct Connection {
    writer: Mutex<UnixStream>,
    /// The connection closed without the rank leaving: its process went away.
    closed: AtomicBool,
    /// Runs the rank stopped waiting for.
    cancelled: Mutex<HashSet<u64>>,
    rank: usize,
    id: ChannelId,
}

impl Connection {
    fn send(&self, message: &Message) {
        // A rank that went away cannot be told; its meetings fail through `closed` instead.
        let _ = write_message(&mut *lock(&self.writer), message);
    }

    /// Why run `tag` must stop waiting, if it must.
    fn stop(&self, tag: u64) -> Option<Error> {
        if self.closed.load(Ordering::Acquire) {
            return Some(self.went_away());
        }
        lock(&self.cancelled)
            .contains(&tag)
            .then(|| Error::cancelled(format!("rank {} stopped waiting for the other ranks", self.rank)))
    }

    fn went_away(&self) -> Error {
        Error::unavailable(format!(
            "cpu-sim: rank {}'s process went away (its connection to channel {:?} closed)",
            self.rank, self.id
        ))
    }
}

/// Serves one connection: a join, then the rank's runs, abandons and cancels until it leaves.
fn serve(stream: UnixStream, place: Unproven) {
    let Some((id, rank, count, proven)) = first_join(&stream) else { return };
    drop(place);
    let Ok(writer) = stream.try_clone() else { return };
    let mut reader = stream;
    let joined = proven.and_then(|()| match (usize::try_from(rank), usize::try_from(count)) {
        (Ok(rank), Ok(count)) => LocalRank::join(&id, rank, count),
        _ => Err(Error::invalid_argument(format!("cpu-sim: rank {rank} of {count} ranks"))),
    });
    let conn = Arc::new(Connection {
        writer: Mutex::new(writer),
        closed: AtomicBool::new(false),
        cancelled: Mutex::new(HashSet::new()),
        rank: rank as usize,
        id,
    });
    conn.send(&Message::Joined(joined.as_ref().map(|_| ()).map_err(Error::clone)));
    let Ok(local) = joined else { return };
    let local = Arc::new(local);
    let mut waiters: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let left = loop {
        match read_message(&mut reader) {
            Ok(Message::Run { tag, key, op, element, count, input, recv_len }) => {
                // Arrived here, in order with this connection's other messages (a loss after it
                // sees the part).
                let part = RemotePart { op, element, count, input, recv_len, output: None };
                local.arrive(key, Ok(Part::Remote(part)));
                let (waiting, conn) = (local.clone(), conn.clone());
                let waiter = std::thread::Builder::new().name("cpu-sim-channel-run".into()).spawn(move || {
                    let (outcome, output) = waiting.await_outcome(key, &|| conn.stop(tag));
                    lock(&conn.cancelled).remove(&tag);
                    conn.send(&Message::Done { tag, outcome: outcome.map(|()| output.unwrap_or_default()) });
                    waiting.replied();
                });
                match waiter {
                    Ok(waiter) => waiters.push(waiter),
                    Err(e) => {
                        local.replied();
                        tracing::warn!("cpu-sim: cannot wait for rank {}'s collective: {e}", local.rank());
                        break false;
                    }
                }
                waiters.retain(|w| !w.is_finished());
            }
            Ok(Message::Cancel { tag }) => {
                lock(&conn.cancelled).insert(tag);
            }
            Ok(Message::Abandon { key, status }) => local.abandon(key, status),
            Ok(Message::Leave) => break true,
            Ok(other) => {
                tracing::warn!("cpu-sim: rank {} of another process sent {other:?} out of turn", local.rank());
                break false;
            }
            Err(_) => break false,
        }
    };
    conn.closed.store(true, Ordering::Release);
    if !left {
        local.lose(conn.went_away());
    }
    for waiter in waiters {
        let _ = waiter.join();
    }
}
