//! Holding this process's channel meetings for ranks in other processes on the same host (Linux),
//! as NCCL's bootstrap root does: the first id made in a process starts one listener on an abstract
//! Unix socket named from the pid and the process's nonce (no file to clean up; it goes with the
//! process). Each connection is one rank of another process: its thread joins the channel for it,
//! and takes part in each meeting with the bytes the rank sent, replying with its result. When the
//! rank leaves, or its connection closes without it leaving (its process died), every meeting the
//! rank is missing from fails for the other ranks, naming it.

use std::collections::HashSet;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hal::{ChannelId, Error};

use crate::collective::{LocalRank, Part, RemotePart, lock, process_nonce};
use crate::collective_wire::{Message, read_message, write_message};

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
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                let serving =
                    std::thread::Builder::new().name("cpu-sim-channel-rank".into()).spawn(move || serve(stream));
                if let Err(e) = serving {
                    tracing::warn!("cpu-sim: cannot serve a rank of another process: {e}");
                }
            }
            Err(e) => tracing::warn!("cpu-sim: accepting a rank of another process: {e}"),
        }
    }
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
fn serve(stream: UnixStream) {
    let Ok(writer) = stream.try_clone() else { return };
    let mut reader = stream;
    let Ok(Message::Join { id, rank, count }) = read_message(&mut reader) else { return };
    let joined = match (usize::try_from(rank), usize::try_from(count)) {
        (Ok(rank), Ok(count)) => LocalRank::join(&id, rank, count),
        _ => Err(Error::invalid_argument(format!("cpu-sim: rank {rank} of {count} ranks"))),
    };
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
