//! A rank whose channel's meetings another process on this host holds (Linux): it connects to that
//! process's socket (named in the id), joins, and runs each collective by sending its send range's
//! bytes and writing back the bytes of its result. A reader thread takes the replies; if the host
//! process goes away, every collective waiting and every later one fails with `Unavailable` naming
//! the channel instead of hanging.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use hal::driver::CollectiveCall;
use hal::driver::{lock, wait_timeout};
use hal::{ChannelId, Error, Result};

use super::host::{socket_address, socket_name};
use super::wire::{Message, read_message, write_message};
use super::{CANCEL_POLL, Key};
use crate::memory::{read_buffer, write_buffer};

/// How long joining keeps trying to reach a busy host process and waits for its answer.
const JOIN_DEADLINE: Duration = Duration::from_secs(30);

/// This device's end of a channel held by another process.
pub(crate) struct RemoteRank {
    rank: usize,
    shared: Arc<Shared>,
    reader: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    writer: Mutex<UnixStream>,
    replies: Mutex<Replies>,
    replied: Condvar,
    next_tag: AtomicU64,
    /// Names the channel and its host, for errors.
    host: String,
}

#[derive(Default)]
struct Replies {
    done: HashMap<u64, Result<Vec<u8>>>,
    /// Why no more replies will come.
    lost: Option<Error>,
}

impl Shared {
    fn send(&self, message: &Message) -> Result<()> {
        write_message(&mut *lock(&self.writer), message)
            .map_err(|e| Error::unavailable(format!("cpu-sim: {} does not answer: {e}", self.host)))
    }
}

impl RemoteRank {
    /// Joins `id`, whose meetings the process `pid` with `nonce` holds, as `rank` of `count`.
    pub(crate) fn join(id: &ChannelId, pid: u32, nonce: u64, rank: usize, count: usize) -> Result<RemoteRank> {
        let name = socket_name(pid, nonce);
        let host = format!("channel {id:?} (held by process {pid} at socket @{name})");
        let address = socket_address(&name)
            .map_err(|e| Error::invalid_argument(format!("cpu-sim: {host}: not a socket name: {e}")))?;
        let deadline = Instant::now() + JOIN_DEADLINE;
        let unanswered =
            |e: std::io::Error| Error::unavailable(format!("cpu-sim: {host} did not answer the join: {e}"));
        let join = Message::Join { id: id.clone(), rank: rank as u64, count: count as u64 };
        let (stream, reader) = loop {
            let stream = connect(&address, &host, deadline)?;
            let mut reader = stream.try_clone().map_err(unanswered)?;
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            reader.set_read_timeout(Some(left)).map_err(unanswered)?;
            // A host that refuses at once may close before the join arrives: its answer is still read.
            let _ = write_message(&mut &stream, &join);
            match read_message(&mut reader) {
                Ok(Message::Joined(Ok(()))) => break (stream, reader),
                Ok(Message::Joined(Err(refused))) => return Err(refused),
                Ok(other) => return Err(Error::internal(format!("cpu-sim: {host} answered a join with {other:?}"))),
                // Closed unanswered: the host had as many connections yet to join as it takes.
                Err(e) if closed(&e) && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(unanswered(e)),
            }
        };
        reader.set_read_timeout(None).map_err(unanswered)?;
        let shared = Arc::new(Shared {
            writer: Mutex::new(stream),
            replies: Mutex::default(),
            replied: Condvar::new(),
            next_tag: AtomicU64::new(0),
            host,
        });
        let replies = shared.clone();
        let reader = std::thread::Builder::new()
            .name("cpu-sim-channel-replies".into())
            .spawn(move || take_replies(reader, &replies))
            .map_err(|e| Error::resource_exhausted(format!("cpu-sim: no thread for {}'s replies: {e}", shared.host)))?;
        Ok(RemoteRank { rank, shared, reader: Some(reader) })
    }

    /// Runs this rank's part of `call`, waiting for the host's reply; `cancelled` is polled and,
    /// once true, the host is told (the meeting then fails for every rank).
    pub(crate) fn run(&self, call: &CollectiveCall, cancelled: &dyn Fn() -> bool) -> Result<()> {
        let key = Key::of(call, self.rank);
        let args = &call.args;
        let (send, recv) = args.elements(self.rank, call.channel.count());
        let size = args.element.size();
        let input = match (send, &args.send) {
            (Some(elements), Some(b)) => match read_buffer(&b.buffer, b.offset, elements * size) {
                Ok(input) => input,
                Err(e) => {
                    // Still arrive, so the other ranks fail instead of waiting.
                    let _ = self.shared.send(&Message::Abandon { key, status: e.clone() });
                    return Err(e.context(format!("{call}")));
                }
            },
            _ => Vec::new(),
        };
        let tag = self.shared.next_tag.fetch_add(1, Ordering::Relaxed);
        let recv_len = recv.map_or(0, |elements| elements * size);
        let run = Message::Run { tag, key, op: args.op, element: args.element, count: args.count, input, recv_len };
        let context = |e: Error| e.context(format!("{call}"));
        self.shared.send(&run).map_err(context)?;
        let output = self.await_reply(tag, cancelled).map_err(context)?;
        match &args.recv {
            Some(b) if !output.is_empty() => {
                if output.len() as u64 > b.length {
                    return Err(context(Error::internal(format!(
                        "cpu-sim: {} sent {} bytes for a receive range of {}",
                        self.shared.host,
                        output.len(),
                        b.length
                    ))));
                }
                write_buffer(&b.buffer, b.offset, &output)
            }
            _ => Ok(()),
        }
    }

    fn await_reply(&self, tag: u64, cancelled: &dyn Fn() -> bool) -> Result<Vec<u8>> {
        let mut told = false;
        let mut replies = lock(&self.shared.replies);
        loop {
            if let Some(done) = replies.done.remove(&tag) {
                return done;
            }
            if let Some(lost) = &replies.lost {
                return Err(lost.clone());
            }
            if !told && cancelled() {
                told = true;
                drop(replies);
                // Keep waiting: the host fails the meeting and replies.
                let _ = self.shared.send(&Message::Cancel { tag });
                replies = lock(&self.shared.replies);
                continue;
            }
            replies = wait_timeout(&self.shared.replied, replies, CANCEL_POLL).0;
        }
    }

    /// Tells the host that this rank leaves (the meetings it has not arrived at fail there).
    pub(crate) fn leave(&self) {
        // If the host is gone there is no meeting left to fail.
        let _ = self.shared.send(&Message::Leave);
    }

    /// Tells the host that this rank's part of `call` will not run, with `status`.
    pub(crate) fn abandon(&self, call: &CollectiveCall, status: Error) {
        // If the host is gone there is no meeting left to fail.
        let _ = self.shared.send(&Message::Abandon { key: Key::of(call, self.rank), status });
    }
}

impl Drop for RemoteRank {
    fn drop(&mut self) {
        let _ = self.shared.send(&Message::Leave);
        let _ = lock(&self.shared.writer).shutdown(std::net::Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// A connection to the host at `address` (named `host`), tried again while it is busy until
/// `deadline`.
fn connect(address: &std::os::unix::net::SocketAddr, host: &str, deadline: Instant) -> Result<UnixStream> {
    loop {
        match UnixStream::connect_addr(address) {
            Ok(stream) => return Ok(stream),
            // The host listened before it made the id: no listener means it is gone (or on
            // another host). A busy one is tried again until the deadline.
            Err(e) if e.kind() == ErrorKind::ConnectionRefused || e.kind() == ErrorKind::NotFound => {
                return Err(Error::unavailable(format!(
                    "cpu-sim: {host}: nobody listens ({e}); the process that made the id must live while its ranks \
                     do, on this host"
                )));
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(Error::unavailable(format!(
                    "cpu-sim: {host} does not answer after {JOIN_DEADLINE:?} ({e})"
                )));
            }
        }
    }
}

/// Whether `e` says the other end closed the connection.
fn closed(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe)
}

/// The reader thread: files each reply by its tag until the connection ends.
fn take_replies(mut reader: UnixStream, shared: &Shared) {
    let lost = loop {
        match read_message(&mut reader) {
            Ok(Message::Done { tag, outcome }) => {
                lock(&shared.replies).done.insert(tag, outcome);
                shared.replied.notify_all();
            }
            Ok(other) => break Error::internal(format!("cpu-sim: {} sent {other:?} out of turn", shared.host)),
            Err(e) => break Error::unavailable(format!("cpu-sim: {} went away ({e})", shared.host)),
        }
    };
    lock(&shared.replies).lost = Some(lost);
    shared.replied.notify_all();
}
