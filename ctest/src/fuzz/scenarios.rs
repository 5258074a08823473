//! The directed scenarios: self-contained checks run in one host step, on semaphores (and for some,
//! devices) of their own, while the random graph runs around them. Each returns its problems.

use std::time::{Duration, Instant};

use hal::{
    BufferParams, Channel, CollectiveArgs, CollectiveOp, Device, ElementType, Error, ReduceOp, Semaphore,
    SemaphoreValue as SV, StatusCode, Timeout,
};

use super::latch::{ReleaseOnDrop, latched_command_buffer, sleeping_command_buffer};
use super::program::{ReadHold, SCRATCH_BYTES, Scenario};
use super::run::{HANG, Run};

/// How long a collective may take to fail once a rank of its channel left.
const LEAVE_BOUND: Duration = Duration::from_secs(5);

impl Run<'_> {
    pub(crate) fn scenario(&self, scenario: &Scenario) -> Vec<String> {
        let mut problems = Vec::new();
        let mut check = |ok: bool, problem: String| {
            if !ok {
                problems.push(problem);
            }
        };
        let slack = self.settings.slack;
        match *scenario {
            Scenario::HostCallOrder { device, queue, sleep_us, slot, marker } => {
                let h = self.handles(device);
                let q = &h.queues[queue];
                let markers = h.markers.clone();
                let call = move || {
                    std::thread::sleep(Duration::from_micros(sleep_us));
                    markers.write(slot * 4, &marker.to_le_bytes())
                };
                let done = Semaphore::new(0);
                let submitted = q
                    .host_call(&[], call, &[])
                    .and_then(|()| q.read(&[], &h.markers, slot * 4, 4, &[SV::new(&done, 1)]))
                    .and_then(|readback| done.wait(1, Timeout::After(HANG)).map(|()| readback));
                match submitted {
                    Ok(readback) => {
                        let bytes = readback.take();
                        check(
                            bytes.as_deref() == Some(&marker.to_le_bytes()[..]),
                            format!("the read behind the host call saw {bytes:?}, not the marker {marker:#x} it wrote"),
                        );
                    }
                    Err(e) => check(false, format!("{e}")),
                }
            }
            Scenario::HostFailIssued { device, queue, wait_queue } => {
                let h = self.handles(device);
                let (s, t) = match (h.device.create_semaphore(0), h.device.create_semaphore(0)) {
                    (Ok(s), Ok(t)) => (s, t),
                    (Err(e), _) | (_, Err(e)) => return vec![format!("setup: {e}")],
                };
                let (cb, latch) = match latched_command_buffer(self.fixture, &h.device) {
                    Ok(latched) => latched,
                    Err(e) => return vec![format!("setup: {e}")],
                };
                let _release = ReleaseOnDrop(latch.clone());
                latch.submitting();
                let submitted = h.queues[queue]
                    .execute(&[], &cb, &[SV::new(&s, 1)])
                    .and_then(|()| h.queues[wait_queue].barrier(&[SV::new(&s, 1)], &[SV::new(&t, 1)]));
                if let Err(e) = submitted {
                    return vec![format!("submission: {e}")];
                }
                // A timed latch that may have run out, or work whose signal of s is applied: the
                // check would prove nothing.
                let in_flight = latch.surely_held() && matches!(s.query(), Ok(0));
                self.in_flight.borrow_mut().record("host_fail_issued", in_flight);
                if !in_flight {
                    return problems;
                }
                let code = StatusCode::DataLoss;
                s.fail(Error::new(code, "fuzz: the host fails s while work that waits on it is issued"));
                latch.release();
                match t.wait(1, Timeout::After(HANG)) {
                    Err(e) if e.code() == code => {}
                    other => check(
                        false,
                        format!(
                            "the work waiting on s (failed by the host before it was reached) gave {other:?}, not {code:?}"
                        ),
                    ),
                }
            }
            Scenario::PartialSignalWait { device, queue } => {
                let h = self.handles(device);
                let s = match h.device.create_semaphore(0) {
                    Ok(s) => s,
                    Err(e) => return vec![format!("setup: {e}")],
                };
                let (cb, latch) = match latched_command_buffer(self.fixture, &h.device) {
                    Ok(latched) => latched,
                    Err(e) => return vec![format!("setup: {e}")],
                };
                let _release = ReleaseOnDrop(latch.clone());
                latch.submitting();
                if let Err(e) = h.queues[queue].execute(&[], &cb, &[SV::new(&s, 5)]) {
                    return vec![format!("submission: {e}")];
                }
                let (tx, rx) = std::sync::mpsc::channel();
                let waiter = {
                    let s = s.clone();
                    std::thread::spawn(move || {
                        let result = s.wait(3, Timeout::After(HANG));
                        let _ = tx.send((result, Instant::now()));
                    })
                };
                std::thread::sleep(Duration::from_millis(2));
                // Past the latch's sure window, or with s at 5, the work may have signalled 5
                // already: a host signal of 3 would be refused.
                let mut in_flight = latch.surely_held() && matches!(s.query(), Ok(0));
                let signalled = Instant::now();
                let refused = if in_flight { s.signal(3).err() } else { None };
                // This thread may have been held up past the latch's sure window between the check
                // above and the signal (a loaded host): the work may have signalled 5 by then.
                in_flight &= refused.is_none() || latch.surely_held();
                self.in_flight.borrow_mut().record("partial_signal_wait", in_flight);
                if !in_flight {
                    latch.release();
                    let _ = waiter.join();
                    return problems;
                }
                if let Some(e) = refused {
                    check(false, format!("host signal of 3 below the in-flight 5: {e}"));
                }
                match rx.recv_timeout(slack + Duration::from_millis(200)) {
                    Ok((result, at)) => {
                        let late = at.saturating_duration_since(signalled);
                        check(
                            result.is_ok() && late <= slack,
                            format!("wait(3) gave {result:?} {late:?} after the host signalled 3"),
                        );
                    }
                    Err(_) => {
                        check(false, "wait(3) had not returned 200 ms past the slack after the host signalled 3".into())
                    }
                }
                latch.release();
                let _ = waiter.join();
                check(s.wait(5, Timeout::After(HANG)).is_ok(), format!("s after the latched work: {:?}", s.query()));
            }
            Scenario::TimeoutDuringHostCall { device, queue, sleep_ms } => {
                let h = self.handles(device);
                let q = &h.queues[queue];
                let s = match h.device.create_semaphore(0) {
                    Ok(s) => s,
                    Err(e) => return vec![format!("setup: {e}")],
                };
                let call = move || {
                    std::thread::sleep(Duration::from_millis(sleep_ms));
                    Ok(())
                };
                if let Err(e) = q.host_call(&[], call, &[]).and_then(|()| q.barrier(&[], &[SV::new(&s, 1)])) {
                    return vec![format!("submission: {e}")];
                }
                let timeout = Duration::from_millis(2);
                let started = Instant::now();
                let result = s.wait(1, Timeout::After(timeout));
                let took = started.elapsed();
                check(
                    took <= timeout + slack,
                    format!(
                        "a wait of {timeout:?} behind a {sleep_ms} ms host call returned {result:?} after {took:?}"
                    ),
                );
                check(s.wait(1, Timeout::After(HANG)).is_ok(), format!("s after the host call: {:?}", s.query()));
            }
            Scenario::DroppedMidRead { queue, hold, host_signal, offset, length } => {
                return self.dropped_mid_read(queue, hold, host_signal, offset, length);
            }
            Scenario::RankLeaves { leaver, before_submit, device_first, delay_us } => {
                return self.rank_leaves(leaver, before_submit, device_first, delay_us);
            }
        }
        problems
    }

    /// See [`Scenario::DroppedMidRead`].
    fn dropped_mid_read(
        &self,
        queue: usize,
        hold: ReadHold,
        host_signal: bool,
        offset: u64,
        length: u64,
    ) -> Vec<String> {
        let pattern: Vec<u8> = (0..length).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
        let gate = Semaphore::new(0);
        let prepared = (|| -> hal::Result<(Device, Semaphore, hal::Readback)> {
            let device = self.fixture.create_device()?;
            let q = device.queue(queue)?;
            let buffer = device.allocate_buffer(BufferParams::device_local(), SCRATCH_BYTES)?;
            let written = device.create_semaphore(0)?;
            q.write(&[], &buffer, offset, pattern.clone(), &[SV::new(&written, 1)])?;
            written.wait(1, Timeout::After(HANG))?;
            let signal = if host_signal { Semaphore::new(0) } else { device.create_semaphore(0)? };
            let waits = match hold {
                ReadHold::HostWait => vec![SV::new(&gate, 1)],
                ReadHold::DeviceWork { sleep_us } => {
                    q.execute(&[], &sleeping_command_buffer(self.fixture, &device, sleep_us)?, &[])?;
                    Vec::new()
                }
                ReadHold::HostCall { sleep_us } => {
                    q.host_call(
                        &[],
                        move || {
                            std::thread::sleep(Duration::from_micros(sleep_us));
                            Ok(())
                        },
                        &[],
                    )?;
                    Vec::new()
                }
            };
            let readback = q.read(&waits, &buffer, offset, length, &[SV::new(&signal, 1)])?;
            Ok((device, signal, readback))
        })();
        let (device, signal, readback) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return vec![format!("setup: {e}")],
        };
        if let ReadHold::DeviceWork { .. } = hold {
            // The case this probe is for: the read still held behind the work as its device drops.
            self.in_flight.borrow_mut().record("dropped_mid_read (device work)", matches!(signal.query(), Ok(0)));
        }
        // Every handle of the device goes (the queue, the buffer and the command buffer did).
        drop(device);
        let mut problems = Vec::new();
        let outcome = readback.wait(Timeout::After(HANG));
        let state = signal.query();
        match (&outcome, &state) {
            (Ok(bytes), _) if matches!(hold, ReadHold::HostWait) => {
                problems.push(format!("a read held behind a host wait nobody signalled ran ({} bytes)", bytes.len()))
            }
            (Ok(bytes), Ok(1..)) if *bytes == pattern => {}
            (Ok(bytes), _) => problems.push(format!(
                "the readback gave {} bytes (the pattern: {}), its signal semaphore is {state:?}",
                bytes.len(),
                *bytes == pattern
            )),
            (Err(e), _) if e.code() == StatusCode::DeadlineExceeded => {
                problems.push(format!("the readback is still pending {HANG:?} after its device dropped: {e}"))
            }
            (Err(e), Err(f)) if e.code() == f.code() => {}
            (Err(e), _) => problems.push(format!(
                "the readback failed with {e}, but its signal semaphore is {state:?}: a read that did not run \
                 fails with its signals' status"
            )),
        }
        if gate.query() != Ok(0) {
            problems.push(format!("the host semaphore the read waited on is {:?}, not 0", gate.query()));
        }
        if let Err(e) = gate.signal(1) {
            problems.push(format!("signalling the host semaphore after the drop: {e}"));
        }
        problems
    }

    /// See [`Scenario::RankLeaves`].
    fn rank_leaves(&self, leaver: usize, before_submit: bool, device_first: bool, delay_us: u64) -> Vec<String> {
        let stayer = 1 - leaver;
        let mut ranks = match self.channel_of_two() {
            Ok(ranks) => ranks,
            Err(e) if e.code() == StatusCode::Unimplemented || e.code() == StatusCode::Unavailable => {
                return Vec::new();
            }
            Err(e) => return vec![format!("setup: {e}")],
        };
        let (leaving_device, leaving_channel) = ranks[leaver].take().expect("both ranks");
        let (device, channel) = ranks[stayer].take().expect("both ranks");
        let leave = move || {
            if device_first {
                drop(leaving_device);
                drop(leaving_channel);
            } else {
                drop(leaving_channel);
                drop(leaving_device);
            }
        };
        let mut leave = Some(leave);
        if before_submit && let Some(leave) = leave.take() {
            leave();
        }
        let prepared = (|| -> hal::Result<(Semaphore, hal::Buffer)> {
            let s = device.create_semaphore(0)?;
            let buffer = device.allocate_buffer(BufferParams::host_visible(), 16)?;
            Ok((s, buffer))
        })();
        let (s, buffer) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return vec![format!("setup: {e}")],
        };
        let args = CollectiveArgs::new(CollectiveOp::AllReduce(ReduceOp::Sum), ElementType::U32, 4)
            .send(&buffer)
            .recv(&buffer);
        let names_leaver = |e: &Error| e.message().contains(&format!("rank {leaver}"));
        let submitted = device.queue(0).and_then(|q| q.collective(&[], &channel, args, &[SV::new(&s, 1)]));
        if let Some(leave) = leave.take() {
            std::thread::sleep(Duration::from_micros(delay_us));
            leave();
        }
        let mut problems = Vec::new();
        match submitted {
            // Refused at submission, once the rank is known to have left: fine if it says why.
            Err(e) if before_submit && names_leaver(&e) => {}
            Err(e) => problems.push(format!("rank {stayer}'s all-reduce was refused: {e}")),
            Ok(()) => {
                let started = Instant::now();
                match s.wait(1, Timeout::After(LEAVE_BOUND)) {
                    Ok(()) => problems.push(format!("rank {stayer}'s all-reduce ran without rank {leaver}")),
                    Err(e) if e.code() == StatusCode::DeadlineExceeded => problems.push(format!(
                        "rank {stayer}'s all-reduce was still pending {LEAVE_BOUND:?} after rank {leaver} dropped its \
                         channel and device without taking part\n{}",
                        device.report()
                    )),
                    Err(e) if !names_leaver(&e) => problems.push(format!(
                        "rank {stayer}'s all-reduce failed after {:?} with {e}, which does not name rank {leaver}",
                        started.elapsed()
                    )),
                    Err(_) => {}
                }
            }
        }
        problems
    }

    /// Two devices of the fixture and ranks 0 and 1 of one channel on them, made from a thread per
    /// rank (a library such as NCCL blocks each until the other arrives).
    fn channel_of_two(&self) -> hal::Result<[Option<(Device, Channel)>; 2]> {
        let devices = [self.fixture.create_device()?, self.fixture.create_device()?];
        let id = devices[0].create_channel_id()?;
        let channels: Vec<hal::Result<Channel>> = std::thread::scope(|scope| {
            let joins: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(rank, device)| {
                    let id = &id;
                    scope.spawn(move || device.create_channel(id, rank, 2))
                })
                .collect();
            joins
                .into_iter()
                .map(|join| join.join().unwrap_or_else(|_| Err(Error::internal("creating a channel panicked"))))
                .collect()
        });
        let mut ranks = [None, None];
        for ((rank, device), channel) in devices.into_iter().enumerate().zip(channels) {
            ranks[rank] = Some((device, channel?));
        }
        Ok(ranks)
    }
}
