//! The TCP rendezvous through which the ranks of a job get rank 0's channel id: rank 0 listens at
//! an address every rank knows (`MASTER_ADDR:MASTER_PORT`, see [`crate::launcher`]) and answers
//! each other rank with the id; the others connect, retrying until rank 0 is there, and receive
//! it. Rank 0 returns once every rank has confirmed it got the id; every wait on both sides ends
//! by a deadline.
//!
//! The protocol is a few small frames, each starting with [`MAGIC`] and the version
//! ([`VERSION`]), numbers little-endian:
//! - hello (rank → rank 0): kind 1, world size `u32`, rank `u32`, job name (`u16` length, at most
//!   [`MAX_JOB`] bytes of UTF-8);
//! - id (rank 0 → rank): kind 2, the id (`u16` length, then its bytes);
//! - refused (rank 0 → rank): kind 3, why (`u16` length, at most [`MAX_MESSAGE`] bytes of UTF-8);
//! - got it (rank → rank 0): kind 4, the rank `u32`.
//!
//! Rank 0 refuses, with a message, a hello of another version, of another world size or job
//! name, of a rank outside the world, of rank 0 itself, or of a rank that already has the id; a
//! connection that sends anything else, or nothing within [`HANDSHAKE`], is dropped. The id is
//! all a process needs to join the channel: the address should be one only the job's nodes reach.
//!
//! An embedder that runs one rank per process joins a channel in three lines:
//!
//! ```no_run
//! # fn main() -> Result<(), String> {
//! use std::time::Duration;
//! let place = tools::launcher::Placement::from_env(None, None).map_err(|e| e.to_string())?;
//! let address = tools::launcher::rendezvous_address(|name| std::env::var(name).ok())
//!     .map_err(|e| e.to_string())?
//!     .ok_or("set MASTER_ADDR and MASTER_PORT")?;
//! let device = tools::registry().create_device_at("cpu-sim").map_err(|e| e.to_string())?;
//! let channel = tools::rendezvous::join_channel(&device, &place, &address, Duration::from_secs(60))?;
//! # let _ = channel;
//! # Ok(())
//! # }
//! ```

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use hal::{Channel, ChannelId, Device, StatusCode};

use crate::launcher::Placement;

/// The first bytes of every frame.
pub const MAGIC: [u8; 8] = *b"thal-rdv";

/// The protocol's version.
pub const VERSION: u16 = 1;

/// The longest job name a hello may carry.
pub const MAX_JOB: usize = 256;

/// The longest refusal message.
pub const MAX_MESSAGE: usize = 1024;

/// The longest id a frame may carry.
const MAX_ID: usize = 4096;

/// How long rank 0 gives one connection to say hello and, once answered, to confirm.
pub const HANDSHAKE: Duration = Duration::from_secs(10);

/// How long a rank waits between tries to reach rank 0.
const RETRY: Duration = Duration::from_millis(100);

const HELLO: u8 = 1;
const ID: u8 = 2;
const REFUSED: u8 = 3;
const GOT_IT: u8 = 4;

/// What a frame said.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    Hello { world_size: u32, rank: u32, job: String },
    Id(Vec<u8>),
    Refused(String),
    GotIt { rank: u32 },
}

/// Why a frame could not be read.
#[derive(Debug)]
enum ReadError {
    /// The connection failed or closed, or the deadline passed.
    Io(std::io::Error),
    /// The peer speaks something else (`bad magic`) or this protocol wrongly.
    Protocol(String),
    /// The peer speaks another version of this protocol.
    Version(u16),
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn encode(frame: &Frame) -> Vec<u8> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend_from_slice(&VERSION.to_le_bytes());
    let text = |kind: u8, body: &[u8], limit: usize, bytes: &mut Vec<u8>| {
        bytes.push(kind);
        let body = &body[..body.len().min(limit)];
        bytes.extend_from_slice(&(body.len() as u16).to_le_bytes());
        bytes.extend_from_slice(body);
    };
    match frame {
        Frame::Hello { world_size, rank, job } => {
            bytes.push(HELLO);
            bytes.extend_from_slice(&world_size.to_le_bytes());
            bytes.extend_from_slice(&rank.to_le_bytes());
            let job = &job.as_bytes()[..job.len().min(MAX_JOB)];
            bytes.extend_from_slice(&(job.len() as u16).to_le_bytes());
            bytes.extend_from_slice(job);
        }
        Frame::Id(id) => text(ID, id, MAX_ID, &mut bytes),
        Frame::Refused(why) => text(REFUSED, truncate(why, MAX_MESSAGE).as_bytes(), MAX_MESSAGE, &mut bytes),
        Frame::GotIt { rank } => {
            bytes.push(GOT_IT);
            bytes.extend_from_slice(&rank.to_le_bytes());
        }
    }
    bytes
}

/// `text` cut to at most `limit` bytes, at a character boundary.
fn truncate(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Reads one frame from `stream` (whose read timeout bounds each read).
fn read_frame(stream: &mut impl Read) -> Result<Frame, ReadError> {
    let mut head = [0u8; 11];
    stream.read_exact(&mut head)?;
    if head[..8] != MAGIC {
        return Err(ReadError::Protocol("it does not speak the rendezvous protocol (bad magic)".into()));
    }
    let version = u16::from_le_bytes([head[8], head[9]]);
    if version != VERSION {
        return Err(ReadError::Version(version));
    }
    let u16_at = |stream: &mut dyn Read| -> std::io::Result<u16> {
        let mut b = [0u8; 2];
        stream.read_exact(&mut b).map(|()| u16::from_le_bytes(b))
    };
    let u32_at = |stream: &mut dyn Read| -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        stream.read_exact(&mut b).map(|()| u32::from_le_bytes(b))
    };
    let body = |stream: &mut dyn Read, limit: usize, what: &str| -> Result<Vec<u8>, ReadError> {
        let length = usize::from(u16_at(stream)?);
        if length > limit {
            return Err(ReadError::Protocol(format!("a {what} of {length} bytes (at most {limit})")));
        }
        let mut bytes = vec![0u8; length];
        stream.read_exact(&mut bytes)?;
        Ok(bytes)
    };
    let text = |bytes: Vec<u8>, what: &str| {
        String::from_utf8(bytes).map_err(|_| ReadError::Protocol(format!("a {what} that is not UTF-8")))
    };
    match head[10] {
        HELLO => {
            let world_size = u32_at(stream)?;
            let rank = u32_at(stream)?;
            let job = text(body(stream, MAX_JOB, "job name")?, "job name")?;
            Ok(Frame::Hello { world_size, rank, job })
        }
        ID => Ok(Frame::Id(body(stream, MAX_ID, "channel id")?)),
        REFUSED => Ok(Frame::Refused(text(body(stream, MAX_MESSAGE, "message")?, "message")?)),
        GOT_IT => Ok(Frame::GotIt { rank: u32_at(stream)? }),
        kind => Err(ReadError::Protocol(format!("a frame of unknown kind {kind}"))),
    }
}

/// The addresses `address` (`HOST:PORT`) names.
fn resolve(address: &str) -> Result<Vec<SocketAddr>, String> {
    let addresses: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|e| format!("rendezvous address {address}: {e} (expected HOST:PORT, e.g. 127.0.0.1:29500)"))?
        .collect();
    if addresses.is_empty() {
        return Err(format!("rendezvous address {address} names no address"));
    }
    Ok(addresses)
}

/// Rank 0's side: listening at the rendezvous address (bound at [`Server::bind`], so that ranks
/// that come early are queued rather than refused).
#[derive(Debug)]
pub struct Server {
    listeners: Vec<TcpListener>,
    address: String,
    world_size: usize,
    job: String,
}

impl Server {
    /// Listens at `address` (`HOST:PORT`, every address the host resolves to) for the other ranks
    /// of a job of `world_size` ranks named `job`.
    pub fn bind(address: &str, world_size: usize, job: &str) -> Result<Server, String> {
        let mut listeners = Vec::new();
        let mut failures = Vec::new();
        for socket in resolve(address)? {
            match TcpListener::bind(socket).and_then(|l| l.set_nonblocking(true).map(|()| l)) {
                Ok(listener) => listeners.push(listener),
                Err(e) => failures.push(format!("{socket}: {e}")),
            }
        }
        if listeners.is_empty() {
            return Err(format!(
                "rank 0 cannot listen at the rendezvous address {address} ({}): it must be an address of rank 0's \
                 host, with a free port",
                failures.join("; ")
            ));
        }
        Ok(Server { listeners, address: address.to_string(), world_size, job: truncate(job, MAX_JOB).to_string() })
    }

    /// The addresses listened at (the port chosen, when `address` gave port 0).
    pub fn local_addresses(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter_map(|l| l.local_addr().ok()).collect()
    }

    /// Hands `id` to every other rank, returning once each has confirmed it, or an error naming the
    /// ranks still missing at `deadline`.
    pub fn serve(&self, id: &[u8], deadline: Instant) -> Result<(), String> {
        let mut served = vec![false; self.world_size];
        served[0] = true;
        let mut left = self.world_size - 1;
        while left > 0 {
            let mut accepted = None;
            for listener in &self.listeners {
                match listener.accept() {
                    Ok((stream, _)) => {
                        accepted = Some(stream);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                    // A connection that failed before it was accepted (reset, aborted): the rank retries.
                    Err(_) => {}
                }
            }
            let Some(stream) = accepted else {
                if Instant::now() >= deadline {
                    let missing: Vec<String> =
                        (0..self.world_size).filter(|&r| !served[r]).map(|r| r.to_string()).collect();
                    return Err(format!(
                        "rank 0: {} of {} ranks did not get the channel id at {} in time (missing: {}): are they \
                         running, with the same rendezvous address?",
                        left,
                        self.world_size,
                        self.address,
                        abbreviate(&missing)
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            if let Some(rank) = self.answer(stream, id, &served, deadline) {
                served[rank] = true;
                left -= 1;
            }
        }
        Ok(())
    }

    /// Answers one connection: the rank that confirmed it got the id, or `None` (refused, garbage,
    /// silent, gone).
    fn answer(&self, mut stream: TcpStream, id: &[u8], served: &[bool], deadline: Instant) -> Option<usize> {
        let within = deadline.saturating_duration_since(Instant::now()).clamp(Duration::from_millis(50), HANDSHAKE);
        stream.set_nonblocking(false).ok()?;
        stream.set_read_timeout(Some(within)).ok()?;
        stream.set_write_timeout(Some(within)).ok()?;
        let _ = stream.set_nodelay(true);
        let refuse = |stream: &mut TcpStream, why: String| {
            let _ = stream.write_all(&encode(&Frame::Refused(why)));
            // What the peer sent past the frame is read and dropped (a little, briefly): closing
            // with unread bytes would reset the connection, and the refusal with it.
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
            let _ = std::io::copy(&mut Read::by_ref(stream).take(64 * 1024), &mut std::io::sink());
            None
        };
        let (world_size, rank, job) = match read_frame(&mut stream) {
            Ok(Frame::Hello { world_size, rank, job }) => (world_size as usize, rank as usize, job),
            Ok(_) => return refuse(&mut stream, "the first frame must be a hello".into()),
            Err(ReadError::Version(v)) => {
                return refuse(&mut stream, format!("rank 0 speaks rendezvous version {VERSION}, not {v}"));
            }
            Err(ReadError::Protocol(why)) => return refuse(&mut stream, format!("not a rendezvous hello: {why}")),
            Err(ReadError::Io(_)) => return None,
        };
        let refusal = if world_size != self.world_size {
            Some(format!(
                "rank {rank} expects a world of {world_size} ranks, but rank 0's job at {} has {}: is it another \
                 job's rendezvous?",
                self.address, self.world_size
            ))
        } else if job != self.job {
            Some(format!("rank {rank} is of job {job:?}, but rank 0 at {} serves job {:?}", self.address, self.job))
        } else if rank == 0 {
            Some(format!("rank 0 is already serving at {}: two processes were given rank 0", self.address))
        } else if rank >= self.world_size {
            Some(format!("rank {rank} is not a rank of a world of {}", self.world_size))
        } else if served[rank] {
            Some(format!("rank {rank} already got the channel id: two processes were given rank {rank}"))
        } else {
            None
        };
        if let Some(why) = refusal {
            return refuse(&mut stream, why);
        }
        stream.write_all(&encode(&Frame::Id(id.to_vec()))).ok()?;
        match read_frame(&mut stream) {
            Ok(Frame::GotIt { rank: confirmed }) if confirmed as usize == rank => Some(rank),
            _ => None,
        }
    }
}

/// The first few of `items`, then how many more.
fn abbreviate(items: &[String]) -> String {
    const SHOWN: usize = 16;
    if items.len() <= SHOWN {
        items.join(", ")
    } else {
        format!("{}, and {} more", items[..SHOWN].join(", "), items.len() - SHOWN)
    }
}

/// A rank's side: the id from rank 0 at `address`, retrying (rank 0 may not listen yet, or be
/// busy) until `deadline`. A refusal or an answer in another protocol ends it at once.
pub fn fetch(address: &str, rank: usize, world_size: usize, job: &str, deadline: Instant) -> Result<Vec<u8>, String> {
    let who = format!("rank {rank} of {world_size}");
    let hello = encode(&Frame::Hello { world_size: world_size as u32, rank: rank as u32, job: job.to_string() });
    let mut last = String::from("nothing answered");
    loop {
        // Resolved again each try: a name may appear once rank 0's node is up.
        let sockets = resolve(address).unwrap_or_default();
        for socket in &sockets {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match try_fetch(socket, &hello, rank, left) {
                Ok(id) => return Ok(id),
                Err(Attempt::Retry(why)) => last = format!("{socket}: {why}"),
                Err(Attempt::Fail(why)) => {
                    return Err(format!("{who}: the rendezvous at {address} ({socket}) {why}"));
                }
            }
        }
        if Instant::now() + RETRY >= deadline {
            return Err(format!(
                "{who}: no channel id from rank 0 at the rendezvous {address} in time (last: {last}): is rank 0 \
                 running, listening there?"
            ));
        }
        std::thread::sleep(RETRY);
    }
}

enum Attempt {
    /// Rank 0 may answer later.
    Retry(String),
    /// It will not.
    Fail(String),
}

fn try_fetch(socket: &SocketAddr, hello: &[u8], rank: usize, left: Duration) -> Result<Vec<u8>, Attempt> {
    let retry = |e: std::io::Error| Attempt::Retry(e.to_string());
    let mut stream = TcpStream::connect_timeout(socket, left.min(HANDSHAKE)).map_err(retry)?;
    stream.set_read_timeout(Some(left)).map_err(retry)?;
    stream.set_write_timeout(Some(left)).map_err(retry)?;
    let _ = stream.set_nodelay(true);
    stream.write_all(hello).map_err(retry)?;
    match read_frame(&mut stream) {
        Ok(Frame::Id(id)) => {
            stream.write_all(&encode(&Frame::GotIt { rank: rank as u32 })).map_err(retry)?;
            // Rank 0 closes once it has read the confirmation; wait for that (bounded) so that the
            // id is used only once rank 0 counted this rank.
            let _ = stream.read(&mut [0u8; 1]);
            Ok(id)
        }
        Ok(Frame::Refused(why)) => Err(Attempt::Fail(format!("refused: {why}"))),
        Ok(other) => Err(Attempt::Fail(format!("answered with an unexpected frame ({other:?})"))),
        Err(ReadError::Version(v)) => {
            Err(Attempt::Fail(format!("speaks rendezvous version {v}; this one speaks {VERSION}")))
        }
        Err(ReadError::Protocol(why)) => Err(Attempt::Fail(format!("answered wrongly: {why}"))),
        // Closed without an answer (a rank 0 going away, a port not yet ours): try again.
        Err(ReadError::Io(e)) => Err(Attempt::Retry(e.to_string())),
    }
}

/// Joins `device` to the channel of the job `place` describes, meeting at `address`: rank 0 makes
/// the id, hands it to every other rank through the rendezvous, then joins; the others get it and
/// join. Every wait is bounded by `timeout` from now.
pub fn join_channel(device: &Device, place: &Placement, address: &str, timeout: Duration) -> Result<Channel, String> {
    let deadline = Instant::now() + timeout;
    let (rank, world_size) = (place.rank, place.world_size);
    let who = format!("rank {rank} of {world_size}");
    let id = if rank == 0 {
        let server = Server::bind(address, world_size, &place.job)?;
        let id = device.create_channel_id().map_err(|e| format!("{who}: cannot make a channel id: {e}"))?;
        server.serve(id.as_bytes(), deadline)?;
        id
    } else {
        let bytes = fetch(address, rank, world_size, &place.job, deadline)?;
        ChannelId::from_bytes(&bytes).map_err(|e| format!("{who}: rank 0 at {address} sent no channel id: {e}"))?
    };
    loop {
        match device.create_channel(&id, rank, world_size) {
            Ok(channel) => return Ok(channel),
            Err(e) if e.code() == StatusCode::Unavailable && rank != 0 && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(format!("{who}: cannot join the channel: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(world_size: usize, job: &str) -> (Server, String) {
        let server = Server::bind("127.0.0.1:0", world_size, job).unwrap();
        let address = server.local_addresses()[0].to_string();
        (server, address)
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    /// Sends `bytes` to `address` and reads what comes back until the peer closes.
    fn exchange(address: &str, bytes: &[u8]) -> Vec<u8> {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        stream.write_all(bytes).unwrap();
        let _ = stream.shutdown(std::net::Shutdown::Write);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        answer
    }

    fn refusal(answer: &[u8]) -> String {
        match read_frame(&mut &answer[..]) {
            Ok(Frame::Refused(why)) => why,
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn frames_round_trip() {
        for frame in [
            Frame::Hello { world_size: 4, rank: 3, job: "job".into() },
            Frame::Id(vec![7; 128]),
            Frame::Refused("no".into()),
            Frame::GotIt { rank: 9 },
        ] {
            assert_eq!(read_frame(&mut &encode(&frame)[..]).unwrap(), frame);
        }
        let long = "é".repeat(MAX_MESSAGE);
        let Frame::Refused(cut) = read_frame(&mut &encode(&Frame::Refused(long))[..]).unwrap() else { panic!() };
        assert_eq!(cut.len(), MAX_MESSAGE, "cut at a character boundary, within the limit");
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        let mut hello = encode(&Frame::Hello { world_size: 2, rank: 1, job: "j".into() });
        for cut in 0..hello.len() {
            assert!(read_frame(&mut &hello[..cut]).is_err(), "cut at {cut}");
        }
        hello[10] = 99;
        assert!(matches!(read_frame(&mut &hello[..]), Err(ReadError::Protocol(_))));
        let mut long = encode(&Frame::Refused(String::new()));
        long.truncate(11);
        long.extend_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(read_frame(&mut &long[..]), Err(ReadError::Protocol(m)) if m.contains("at most 1024")));
        let mut not_utf8 = encode(&Frame::Refused("ab".into()));
        let end = not_utf8.len() - 1;
        not_utf8[end] = 0xFF;
        assert!(matches!(read_frame(&mut &not_utf8[..]), Err(ReadError::Protocol(m)) if m.contains("not UTF-8")));
        // Pseudo-random bytes, with and without the magic in front.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for round in 0..2000 {
            let length = (round % 64) as usize;
            let mut bytes: Vec<u8> = if round % 2 == 0 { MAGIC.to_vec() } else { Vec::new() };
            if round % 4 == 0 {
                bytes.extend_from_slice(&VERSION.to_le_bytes());
            }
            for _ in 0..length {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                bytes.push(state as u8);
            }
            let _ = read_frame(&mut &bytes[..]);
        }
    }

    #[test]
    fn ranks_get_the_id_and_rank_0_returns_once_all_have_it() {
        let (server, address) = server(4, "job-1");
        let id = vec![42u8; 128];
        std::thread::scope(|s| {
            let ranks: Vec<_> = (1..4)
                .map(|rank| {
                    let address = address.clone();
                    s.spawn(move || fetch(&address, rank, 4, "job-1", soon(20_000)))
                })
                .collect();
            server.serve(&id, soon(20_000)).unwrap();
            for rank in ranks {
                assert_eq!(rank.join().unwrap().unwrap(), id);
            }
        });
    }

    #[test]
    fn a_rank_retries_until_rank_0_listens() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let address = format!("127.0.0.1:{port}");
        std::thread::scope(|s| {
            let rank = s.spawn(|| fetch(&address, 1, 2, "", soon(20_000)));
            std::thread::sleep(Duration::from_millis(300));
            let server = Server::bind(&address, 2, "").unwrap();
            server.serve(b"late", soon(20_000)).unwrap();
            assert_eq!(rank.join().unwrap().unwrap(), b"late");
        });
    }

    #[test]
    fn wrong_magic_version_world_size_job_and_ranks_are_refused() {
        let (server, address) = server(3, "job-1");
        std::thread::scope(|s| {
            let served = s.spawn(|| server.serve(b"the id", soon(20_000)));
            // Another protocol altogether.
            let answer = exchange(&address, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            assert!(refusal(&answer).contains("bad magic"), "{answer:?}");
            // Another version.
            let mut old = encode(&Frame::Hello { world_size: 3, rank: 1, job: "job-1".into() });
            old[8] = 9;
            assert_eq!(refusal(&exchange(&address, &old)), "rank 0 speaks rendezvous version 1, not 9");
            // Another job's world size, or its name.
            let error = fetch(&address, 1, 2, "job-1", soon(5_000)).unwrap_err();
            assert!(error.contains("refused: rank 1 expects a world of 2 ranks, but rank 0's job"), "{error}");
            assert!(error.starts_with("rank 1 of 2: the rendezvous at"), "{error}");
            let error = fetch(&address, 1, 3, "job-2", soon(5_000)).unwrap_err();
            assert!(error.contains("rank 1 is of job \"job-2\", but rank 0 at"), "{error}");
            // Rank 0 twice, a rank outside the world.
            let error = fetch(&address, 0, 3, "job-1", soon(5_000)).unwrap_err();
            assert!(error.contains("two processes were given rank 0"), "{error}");
            let hello = encode(&Frame::Hello { world_size: 3, rank: 7, job: "job-1".into() });
            assert_eq!(refusal(&exchange(&address, &hello)), "rank 7 is not a rank of a world of 3");
            // A first frame that is not a hello; a silent connection that closes; a cut hello.
            assert!(refusal(&exchange(&address, &encode(&Frame::GotIt { rank: 1 }))).contains("must be a hello"));
            assert!(exchange(&address, b"").is_empty());
            let hello = encode(&Frame::Hello { world_size: 3, rank: 1, job: "job-1".into() });
            assert!(exchange(&address, &hello[..hello.len() - 2]).is_empty());
            // A rank that takes the id without confirming is not counted: it may come again.
            assert!(matches!(read_frame(&mut &exchange(&address, &hello)[..]), Ok(Frame::Id(id)) if id == b"the id"));
            // Then the job's ranks, once each.
            assert_eq!(fetch(&address, 1, 3, "job-1", soon(5_000)).unwrap(), b"the id");
            let error = fetch(&address, 1, 3, "job-1", soon(5_000)).unwrap_err();
            assert!(error.contains("rank 1 already got the channel id"), "{error}");
            assert_eq!(fetch(&address, 2, 3, "job-1", soon(5_000)).unwrap(), b"the id");
            served.join().unwrap().unwrap();
        });
    }

    #[test]
    fn rank_0_and_a_rank_without_it_give_up_at_their_deadline() {
        let (server, address) = server(3, "");
        std::thread::scope(|s| {
            let started = Instant::now();
            let one = s.spawn(|| fetch(&address, 1, 3, "", soon(20_000)));
            let error = server.serve(b"id", soon(500)).unwrap_err();
            assert!(
                error.contains("1 of 3 ranks did not get the channel id") && error.contains("(missing: 2)"),
                "{error}"
            );
            assert!(started.elapsed() < Duration::from_secs(10));
            one.join().unwrap().unwrap();
        });
        drop(server);
        let started = Instant::now();
        let error = fetch(&address, 1, 3, "", soon(400)).unwrap_err();
        assert!(error.starts_with("rank 1 of 3: no channel id from rank 0 at the rendezvous"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A rendezvous address that does not resolve, or that is not this host's.
        assert!(Server::bind("no-port", 2, "").unwrap_err().contains("expected HOST:PORT"));
        assert!(Server::bind("192.0.2.1:1", 2, "").unwrap_err().contains("cannot listen"));
    }

    #[test]
    fn ranks_join_a_channel_through_the_rendezvous() {
        let (server, address) = server(2, "");
        drop(server);
        let place = |rank| Placement {
            rank,
            world_size: 2,
            local_rank: None,
            launcher: crate::launcher::Launcher::Explicit,
            job: String::new(),
        };
        std::thread::scope(|s| {
            let ranks: Vec<_> = (0..2)
                .map(|rank| {
                    let address = address.clone();
                    s.spawn(move || {
                        let device = driver_cpu_sim::create_device().unwrap();
                        join_channel(&device, &place(rank), &address, Duration::from_secs(20)).map(|_| ())
                    })
                })
                .collect();
            for rank in ranks {
                rank.join().unwrap().unwrap();
            }
        });
    }
}
