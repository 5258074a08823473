//! The optional completion and tracing modes on a real GPU: completion through host callbacks on a
//! callback stream (`CompletionWait::HostCallback`), and per-submission device timings
//! (`CudaOptions::submission_timings`) seen by a `tracing` subscriber on the `complete` spans.
//! Without the CUDA driver library at build time every test is ignored (see `tests/common/mod.rs`).
//!
//! One binary of its own: the timing test installs the process-wide `tracing` subscriber (the spans
//! it reads are entered on completion threads, which a thread-local subscriber would not see).

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::*;
use driver_cuda::{CompletionWait, CudaOptions};
use hal::{BufferBinding, CommandBufferMode, Device, SemaphoreValue as SV};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

macro_rules! require_cuda {
    () => {
        if !require_cuda() {
            return;
        }
    };
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn host_callbacks_retire_bursts_and_report_nothing_lost() {
    require_cuda!();
    let options = CudaOptions { completion_wait: CompletionWait::HostCallback, ..CudaOptions::default() };
    let (device, backend) = device_with(options);
    let Some(exe) = kernels(&device) else { return };
    let n = 256u32;
    let data = device_buffer(&device, 4 * u64::from(n));
    let add_one = device.create_command_buffer(CommandBufferMode::Reusable).unwrap();
    add_one
        .dispatch(&exe, exe.entry_point("add_one_u32").unwrap(), [1, 1, 1], &[n], &[BufferBinding::whole(&data)])
        .unwrap();
    add_one.end().unwrap();
    let (q0, q1) = (device.queue(0).unwrap(), device.queue(1).unwrap());
    let s = device.create_semaphore(0).unwrap();
    // A dependent chain hopping between two queues: every completion goes through a callback.
    let submissions = 2000u64;
    for i in 0..submissions {
        let queue = if i % 2 == 0 { &q0 } else { &q1 };
        queue.execute(&[SV::new(&s, i)], &add_one, &[SV::new(&s, i + 1)]).unwrap();
    }
    // Nobody waits on the host (a host wait would retire work itself, by querying the event): the
    // completion threads' callbacks must.
    poll_until(&s, submissions);
    assert!(u32s(&read_back(&device, &data)).iter().all(|&w| w == submissions as u32));
    device.wait_idle_for_test();
    let callbacks = backend.completion_callbacks();
    println!("{submissions} submissions retired through {callbacks} host callbacks");
    assert!(callbacks > 0, "completion went through host callbacks");
    // One outstanding per queue, each retiring everything completed: never more callbacks than
    // submissions (fewer whenever the GPU runs ahead of the callbacks).
    assert!(callbacks <= submissions, "at most one callback per completion wait: {callbacks}");

    // A lone submission, with no host waiter: one callback wakes its queue.
    let before = backend.completion_callbacks();
    let t = device.create_semaphore(0).unwrap();
    let start = Instant::now();
    q1.execute(&[], &add_one, &[SV::new(&t, 1)]).unwrap();
    poll_until(&t, 1);
    println!("one submission, retired through a callback: {:?}", start.elapsed());
    device.wait_idle_for_test();
    assert!(backend.completion_callbacks() > before);
    assert!(device.resource_usage().is_idle(), "{}", device.resource_usage());
}

/// (action id, `device_ns`) of every `complete` span that carried a device time.
#[derive(Clone, Default)]
struct DeviceTimes(Arc<Mutex<Vec<(u64, u64)>>>);

#[derive(Default)]
struct CompleteFields {
    action: Option<u64>,
    device_ns: Option<u64>,
}

impl Visit for CompleteFields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "action" => self.action = Some(value),
            "device_ns" => self.device_ns = Some(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for DeviceTimes {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().name() == "complete"
            && let Some(span) = ctx.span(id)
        {
            let mut fields = CompleteFields::default();
            attrs.record(&mut fields);
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<CompleteFields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(fields) = span.extensions().get::<CompleteFields>()
            && let (Some(action), Some(device_ns)) = (fields.action, fields.device_ns)
        {
            self.0.lock().unwrap().push((action, device_ns));
        }
    }
}

fn device_times() -> &'static DeviceTimes {
    static TIMES: OnceLock<DeviceTimes> = OnceLock::new();
    TIMES.get_or_init(|| {
        let times = DeviceTimes::default();
        let subscriber = tracing_subscriber::registry().with(times.clone());
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of this binary");
        times
    })
}

#[test]
#[cfg_attr(
    not(any(hal_cuda_found, hal_cuda_required)),
    ignore = "no CUDA driver (libcuda.so.1) on the build machine; on a GPU: --include-ignored with HAL_REQUIRE_CUDA=1"
)]
fn submission_timings_measure_each_submission_on_the_device() {
    require_cuda!();
    let times = device_times();
    let options = CudaOptions { submission_timings: true, ..CudaOptions::default() };
    let (device, _backend) = device_with(options);
    let Some(exe) = kernels(&device) else { return };
    let sleep = |us: u32| {
        let cb = device.create_command_buffer(CommandBufferMode::OneShot).unwrap();
        cb.dispatch(&exe, exe.entry_point("sleep_us").unwrap(), [1, 1, 1], &[us], &[]).unwrap();
        cb.end().unwrap();
        cb
    };
    let (short, long) = (sleep(100), sleep(2000));
    let buf = device_buffer(&device, 1 << 20);
    let q = device.queue(0).unwrap();
    let s = device.create_semaphore(0).unwrap();
    q.execute(&[], &short, &[SV::new(&s, 1)]).unwrap();
    q.execute(&[SV::new(&s, 1)], &long, &[SV::new(&s, 2)]).unwrap();
    q.fill(&[SV::new(&s, 2)], &buf, 0, 1 << 20, 7u8, &[SV::new(&s, 3)]).unwrap();
    s.wait(3, T).unwrap();
    device.wait_idle_for_test();
    let usage = device.resource_usage();
    let timing = usage.pools.iter().find(|p| p.name == "timing events").expect("a timing event pool");
    assert_eq!(timing.in_use, 0, "every timing pair read back: {usage}");
    assert!(timing.created >= 2, "{usage}");

    let mut timed = times.0.lock().unwrap().clone();
    timed.sort();
    let last3: Vec<Duration> = timed.iter().rev().take(3).rev().map(|&(_, ns)| Duration::from_nanos(ns)).collect();
    println!("device times of the last three submissions: {last3:?}");
    assert_eq!(last3.len(), 3, "three timed submissions: {timed:?}");
    let (short_t, long_t, fill_t) = (last3[0], last3[1], last3[2]);
    assert!(short_t >= Duration::from_micros(95) && short_t < Duration::from_millis(50), "100 us sleep: {short_t:?}");
    assert!(long_t >= Duration::from_micros(1990) && long_t < Duration::from_millis(60), "2 ms sleep: {long_t:?}");
    assert!(fill_t < Duration::from_millis(5), "1 MiB fill: {fill_t:?}");
}

/// Watches `semaphore` reach `value` without a host wait (`query` never retires work, so whatever
/// signals it is the completion path under test). Fails after 20 s.
fn poll_until(semaphore: &hal::Semaphore, value: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while semaphore.query().unwrap() < value {
        assert!(Instant::now() < deadline, "value {value} not reached: {:?}", semaphore.query());
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Waits until the device has nothing pending or in flight (resources back in their pools).
trait WaitIdle {
    fn wait_idle_for_test(&self);
}

impl WaitIdle for Device {
    fn wait_idle_for_test(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.resource_usage().is_idle() {
            assert!(Instant::now() < deadline, "not idle: {}\n{}", self.resource_usage(), self.report());
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
