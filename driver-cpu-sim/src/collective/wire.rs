//! The messages between a rank in another process and the process holding its channel's meetings.
//! A frame is a `u64` LE payload length and the payload: a tag byte, then fields (`u64` LE
//! numbers, bytes and strings as a `u64` LE length and the bytes).

use std::io::{self, Read, Write};

use hal::{ChannelId, CollectiveOp, ElementType, Error, ReduceOp, StatusCode};

use super::Key;

/// One message.
#[derive(Debug)]
pub(crate) enum Message {
    /// Client to host, first: join `id` as `rank` of `count`.
    Join { id: ChannelId, rank: u64, count: u64 },
    /// Host to client: the join's outcome.
    Joined(Result<(), Error>),
    /// Client to host: run this rank's part of meeting `key` (`tag` names it in the reply).
    Run { tag: u64, key: Key, op: CollectiveOp, element: ElementType, count: u64, input: Vec<u8>, recv_len: u64 },
    /// Client to host: the rank stopped waiting for run `tag`.
    Cancel { tag: u64 },
    /// Client to host: the rank's part of meeting `key` will not run, with this status.
    Abandon { key: Key, status: Error },
    /// Client to host: the rank leaves (its channel was dropped).
    Leave,
    /// Host to client: run `tag`'s outcome, with the bytes for the rank's receive range.
    Done { tag: u64, outcome: Result<Vec<u8>, Error> },
}

/// The payload bytes of a join, the most a connection may send before it joined.
pub(crate) const JOIN_LENGTH: u64 = 1 + 8 + ChannelId::LEN as u64 + 8 + 8;

const REDUCE_OPS: [ReduceOp; 5] = ReduceOp::ALL;

const ELEMENTS: [ElementType; 10] = ElementType::ALL;

/// Writes `message` as one frame.
pub(crate) fn write_message(out: &mut impl Write, message: &Message) -> io::Result<()> {
    let mut payload = Payload(Vec::new());
    match message {
        Message::Join { id, rank, count } => {
            payload.u8(0);
            payload.bytes(id.as_bytes());
            payload.u64(*rank);
            payload.u64(*count);
        }
        Message::Joined(outcome) => {
            payload.u8(1);
            payload.outcome(outcome.as_ref().map(|()| &[][..]));
        }
        Message::Run { tag, key, op, element, count, input, recv_len } => {
            payload.u8(2);
            payload.u64(*tag);
            payload.key(*key);
            payload.op(*op);
            payload.u8(ELEMENTS.iter().position(|e| e == element).expect("every element type is listed") as u8);
            payload.u64(*count);
            payload.bytes(input);
            payload.u64(*recv_len);
        }
        Message::Cancel { tag } => {
            payload.u8(3);
            payload.u64(*tag);
        }
        Message::Abandon { key, status } => {
            payload.u8(4);
            payload.key(*key);
            payload.error(status);
        }
        Message::Leave => payload.u8(5),
        Message::Done { tag, outcome } => {
            payload.u8(6);
            payload.u64(*tag);
            payload.outcome(outcome.as_ref().map(Vec::as_slice));
        }
    }
    let mut frame = Vec::with_capacity(8 + payload.0.len());
    frame.extend_from_slice(&(payload.0.len() as u64).to_le_bytes());
    frame.extend_from_slice(&payload.0);
    out.write_all(&frame)?;
    out.flush()
}

/// Reads one frame (`UnexpectedEof` when the other end closed; `InvalidData` for a malformed one).
pub(crate) fn read_message(input: &mut impl Read) -> io::Result<Message> {
    read_message_within(input, u64::MAX)
}

/// Reads one frame of at most `most` payload bytes: a longer one is refused (`InvalidData`) from
/// its length, before any of its payload is read.
pub(crate) fn read_message_within(input: &mut impl Read, most: u64) -> io::Result<Message> {
    let mut length = [0u8; 8];
    input.read_exact(&mut length)?;
    let length = u64::from_le_bytes(length);
    if length > most {
        return Err(malformed(&format!("a message of {length} bytes where at most {most} may come")));
    }
    // Read as it arrives: a bad length cannot make us allocate more than was sent.
    let mut payload = Vec::new();
    input.take(length).read_to_end(&mut payload)?;
    if payload.len() as u64 != length {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed inside a message"));
    }
    let mut fields = Fields(&payload);
    let message = match fields.u8()? {
        0 => Message::Join {
            id: ChannelId::from_bytes(fields.bytes()?).map_err(|e| malformed(e.message()))?,
            rank: fields.u64()?,
            count: fields.u64()?,
        },
        1 => Message::Joined(fields.outcome()?.map(|_| ())),
        2 => Message::Run {
            tag: fields.u64()?,
            key: fields.key()?,
            op: fields.op()?,
            element: *ELEMENTS.get(fields.u8()? as usize).ok_or_else(|| malformed("an unknown element type"))?,
            count: fields.u64()?,
            input: fields.bytes()?.to_vec(),
            recv_len: fields.u64()?,
        },
        3 => Message::Cancel { tag: fields.u64()? },
        4 => Message::Abandon { key: fields.key()?, status: fields.error()? },
        5 => Message::Leave,
        6 => Message::Done { tag: fields.u64()?, outcome: fields.outcome()? },
        tag => return Err(malformed(&format!("an unknown message tag {tag}"))),
    };
    if !fields.0.is_empty() {
        return Err(malformed("bytes after the message"));
    }
    Ok(message)
}

fn malformed(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("a malformed cpu-sim collective message: {what}"))
}

struct Payload(Vec<u8>);

impl Payload {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }

    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }

    fn key(&mut self, key: Key) {
        let (kind, lo, hi, sequence) = match key {
            Key::All(sequence) => (0, 0, 0, sequence),
            Key::Pair(lo, hi, sequence) => (1, lo, hi, sequence),
        };
        self.u8(kind);
        self.u64(lo as u64);
        self.u64(hi as u64);
        self.u64(sequence);
    }

    fn op(&mut self, op: CollectiveOp) {
        let reduce = |op: ReduceOp| REDUCE_OPS.iter().position(|r| *r == op).expect("every reduction is listed") as u64;
        let (kind, a, b) = match op {
            CollectiveOp::AllReduce(op) => (0, reduce(op), 0),
            CollectiveOp::Broadcast { root } => (1, root as u64, 0),
            CollectiveOp::Reduce { op, root } => (2, reduce(op), root as u64),
            CollectiveOp::AllGather => (3, 0, 0),
            CollectiveOp::ReduceScatter(op) => (4, reduce(op), 0),
            CollectiveOp::AllToAll => (5, 0, 0),
            CollectiveOp::Send { peer } => (6, peer as u64, 0),
            CollectiveOp::Recv { peer } => (7, peer as u64, 0),
            CollectiveOp::Barrier => (8, 0, 0),
        };
        self.u8(kind);
        self.u64(a);
        self.u64(b);
    }

    fn error(&mut self, error: &Error) {
        self.bytes(error.code().as_str().as_bytes());
        self.bytes(error.message().as_bytes());
    }

    fn outcome(&mut self, outcome: Result<&[u8], &Error>) {
        match outcome {
            Ok(bytes) => {
                self.u8(0);
                self.bytes(bytes);
            }
            Err(error) => {
                self.u8(1);
                self.error(error);
            }
        }
    }
}

struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(malformed("it ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn usize(&mut self) -> io::Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| malformed("a rank out of range"))
    }

    fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.usize()?;
        self.take(n)
    }

    fn key(&mut self) -> io::Result<Key> {
        let kind = self.u8()?;
        let (lo, hi, sequence) = (self.usize()?, self.usize()?, self.u64()?);
        match kind {
            0 => Ok(Key::All(sequence)),
            1 => Ok(Key::Pair(lo, hi, sequence)),
            _ => Err(malformed("an unknown meeting kind")),
        }
    }

    fn op(&mut self) -> io::Result<CollectiveOp> {
        let kind = self.u8()?;
        let (a, b) = (self.usize()?, self.usize()?);
        let reduce = || REDUCE_OPS.get(a).copied().ok_or_else(|| malformed("an unknown reduction"));
        Ok(match kind {
            0 => CollectiveOp::AllReduce(reduce()?),
            1 => CollectiveOp::Broadcast { root: a },
            2 => CollectiveOp::Reduce { op: reduce()?, root: b },
            3 => CollectiveOp::AllGather,
            4 => CollectiveOp::ReduceScatter(reduce()?),
            5 => CollectiveOp::AllToAll,
            6 => CollectiveOp::Send { peer: a },
            7 => CollectiveOp::Recv { peer: a },
            8 => CollectiveOp::Barrier,
            _ => return Err(malformed("an unknown collective")),
        })
    }

    fn string(&mut self) -> io::Result<String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| malformed("a string that is not UTF-8"))
    }

    fn error(&mut self) -> io::Result<Error> {
        let name = self.string()?;
        let message = self.string()?;
        // A code this build does not know (a newer peer) still fails, as an internal error.
        let code = StatusCode::ALL.iter().copied().find(|c| c.as_str() == name).unwrap_or(StatusCode::Internal);
        Ok(Error::new(code, message))
    }

    fn outcome(&mut self) -> io::Result<Result<Vec<u8>, Error>> {
        match self.u8()? {
            0 => Ok(Ok(self.bytes()?.to_vec())),
            1 => Ok(Err(self.error()?)),
            _ => Err(malformed("an unknown outcome")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(message: &Message) -> Message {
        let mut frame = Vec::new();
        write_message(&mut frame, message).unwrap();
        read_message(&mut frame.as_slice()).unwrap()
    }

    #[test]
    fn messages_round_trip() {
        let run = Message::Run {
            tag: 7,
            key: Key::Pair(1, 3, 9),
            op: CollectiveOp::Reduce { op: ReduceOp::Max, root: 2 },
            element: ElementType::BF16,
            count: 5,
            input: vec![1, 2, 3],
            recv_len: 10,
        };
        let Message::Run {
            tag: 7,
            key: Key::Pair(1, 3, 9),
            op,
            element: ElementType::BF16,
            count: 5,
            input,
            recv_len: 10,
        } = round_trip(&run)
        else {
            panic!("not the run sent")
        };
        assert_eq!((op, input), (CollectiveOp::Reduce { op: ReduceOp::Max, root: 2 }, vec![1, 2, 3]));
        let status = Error::aborted("rank 1's wait failed");
        let Message::Abandon { key: Key::All(4), status: back } =
            round_trip(&Message::Abandon { key: Key::All(4), status: status.clone() })
        else {
            panic!("not the abandon sent")
        };
        assert_eq!(back, status, "the code and the message survive");
        let Message::Done { tag: 2, outcome: Ok(bytes) } =
            round_trip(&Message::Done { tag: 2, outcome: Ok(vec![9; 4]) })
        else {
            panic!("not the reply sent")
        };
        assert_eq!(bytes, vec![9; 4]);
        for code in StatusCode::ALL {
            let Message::Joined(Err(e)) = round_trip(&Message::Joined(Err(Error::new(code, "m")))) else { panic!() };
            assert_eq!(e.code(), code);
        }
    }

    #[test]
    fn malformed_frames_are_refused() {
        let mut frame = Vec::new();
        write_message(&mut frame, &Message::Cancel { tag: 1 }).unwrap();
        let short = &frame[..frame.len() - 1];
        assert_eq!(read_message(&mut &short[..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let mut unknown = 1u64.to_le_bytes().to_vec();
        unknown.push(99);
        assert_eq!(read_message(&mut unknown.as_slice()).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(3);
        assert!(read_message(&mut huge.as_slice()).is_err(), "a length past the data is refused, not allocated");
    }

    #[test]
    fn a_join_fits_the_length_allowed_before_joining_and_longer_frames_are_refused_unread() {
        let mut join = Vec::new();
        write_message(
            &mut join,
            &Message::Join { id: ChannelId::from_bytes(&[7; ChannelId::LEN]).unwrap(), rank: 1, count: 2 },
        )
        .unwrap();
        assert_eq!(join.len() as u64, 8 + JOIN_LENGTH);
        let Message::Join { rank: 1, count: 2, .. } = read_message_within(&mut join.as_slice(), JOIN_LENGTH).unwrap()
        else {
            panic!("not the join sent")
        };
        // A length one past the limit, followed by the bytes it announces: none of them is read.
        let mut long = (JOIN_LENGTH + 1).to_le_bytes().to_vec();
        long.extend(std::iter::repeat_n(0u8, JOIN_LENGTH as usize + 1));
        let mut input = long.as_slice();
        let refused = read_message_within(&mut input, JOIN_LENGTH).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::InvalidData, "{refused}");
        assert_eq!(input.len(), JOIN_LENGTH as usize + 1, "only the length was read");
    }
}
