//! The GPU's SM clock over a bench run, read from NVML (`libnvidia-ml.so.1`, opened at run time).
//!
//! An NVIDIA GPU lowers its SM clock when it is lightly used for a few seconds: on an H200, rows that
//! keep it about a fifth busy (round trips, hops of one tiny kernel) ran at 345 MHz instead of 1 980,
//! two to three times slower for the HAL and the raw API alike. A row whose HAL and raw trials ran at
//! different clocks compares clocks, not code; each row therefore carries the least and the most
//! SM clock seen while its trials ran (see [`ClockWatch::range`]).
//!
//! The clock is sampled by a thread of its own every [`PERIOD`]; NVML is thread-safe. The NVML
//! device read is the one at the device's ordinal, or the only one where there is one.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the clock is read.
pub const PERIOD: Duration = Duration::from_millis(50);

/// `0` leaves the clock unread (the rows then carry none).
pub const GPU_CLOCK_ENV: &str = "HAL_BENCH_GPU_CLOCK";

/// `NVML_CLOCK_SM`.
const NVML_CLOCK_SM: c_int = 1;

type Init = unsafe extern "C" fn() -> c_int;
type Count = unsafe extern "C" fn(*mut c_uint) -> c_int;
type HandleByIndex = unsafe extern "C" fn(c_uint, *mut *mut c_void) -> c_int;
type ClockInfo = unsafe extern "C" fn(*mut c_void, c_int, *mut c_uint) -> c_int;
type Name = unsafe extern "C" fn(*mut c_void, *mut c_char, c_uint) -> c_int;

/// NVML, initialised, and the device whose clock is read.
struct Nvml {
    /// Keeps the functions below loaded.
    _library: libloading::Library,
    shutdown: unsafe extern "C" fn() -> c_int,
    clock_info: ClockInfo,
    device: *mut c_void,
}

// SAFETY: NVML's functions may be called from any thread (NVML is thread-safe), and its device
// handles are plain identifiers valid until `nvmlShutdown`, which only `Drop` calls.
unsafe impl Send for Nvml {}

impl Nvml {
    /// Opens NVML and the device for `ordinal`; its name beside it. Says why where it cannot.
    fn open(ordinal: usize) -> Result<(Nvml, String), String> {
        // SAFETY: loading NVML runs only its initialisers.
        let library = unsafe { libloading::Library::new("libnvidia-ml.so.1") }.map_err(|e| format!("NVML: {e}"))?;
        // SAFETY: the symbols have the C signatures of NVML's header (`nvml.h`).
        let (init, shutdown, count, by_index, clock_info, name) = unsafe {
            let symbol = |name: &str| format!("NVML: no {name}");
            (
                *library.get::<Init>(b"nvmlInit_v2\0").map_err(|_| symbol("nvmlInit_v2"))?,
                *library
                    .get::<unsafe extern "C" fn() -> c_int>(b"nvmlShutdown\0")
                    .map_err(|_| symbol("nvmlShutdown"))?,
                *library.get::<Count>(b"nvmlDeviceGetCount_v2\0").map_err(|_| symbol("nvmlDeviceGetCount_v2"))?,
                *library
                    .get::<HandleByIndex>(b"nvmlDeviceGetHandleByIndex_v2\0")
                    .map_err(|_| symbol("nvmlDeviceGetHandleByIndex_v2"))?,
                *library.get::<ClockInfo>(b"nvmlDeviceGetClockInfo\0").map_err(|_| symbol("nvmlDeviceGetClockInfo"))?,
                *library.get::<Name>(b"nvmlDeviceGetName\0").map_err(|_| symbol("nvmlDeviceGetName"))?,
            )
        };
        // SAFETY: no arguments; balanced by `nvmlShutdown` below or in `Drop`.
        let status = unsafe { init() };
        if status != 0 {
            return Err(format!("NVML: nvmlInit_v2 returned {status}"));
        }
        // From here `Drop` balances the initialisation.
        let mut nvml = Nvml { _library: library, shutdown, clock_info, device: std::ptr::null_mut() };
        let mut devices: c_uint = 0;
        // SAFETY: `devices` is a valid out-pointer.
        let status = unsafe { count(&mut devices) };
        if status != 0 || devices == 0 {
            return Err(format!("NVML: {devices} devices (nvmlDeviceGetCount_v2 returned {status})"));
        }
        let index = if devices == 1 { 0 } else { ordinal as c_uint };
        // SAFETY: `nvml.device` is a valid out-pointer; an index past the count is an error return.
        let status = unsafe { by_index(index, &mut nvml.device) };
        if status != 0 {
            return Err(format!("NVML: no device {index} of {devices} (returned {status})"));
        }
        let mut buffer = [0 as c_char; 96];
        // SAFETY: the buffer holds `buffer.len()` bytes; NVML terminates the name within it.
        let named = unsafe { name(nvml.device, buffer.as_mut_ptr(), buffer.len() as c_uint) } == 0;
        let bytes: Vec<u8> = buffer.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        let name = if named { String::from_utf8_lossy(&bytes).into_owned() } else { "unnamed".to_string() };
        Ok((nvml, format!("NVML device {index} '{name}'")))
    }

    /// The SM clock now, in MHz.
    fn sm_clock(&self) -> Option<u32> {
        let mut mhz: c_uint = 0;
        // SAFETY: a live device handle and a valid out-pointer.
        (unsafe { (self.clock_info)(self.device, NVML_CLOCK_SM, &mut mhz) } == 0).then_some(mhz)
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the successful `nvmlInit_v2` of `open`; the handle is not used after.
        unsafe { (self.shutdown)() };
    }
}

/// A thread reading the SM clock every [`PERIOD`] until dropped.
pub struct ClockWatch {
    samples: Arc<Mutex<Vec<(Instant, u32)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Which NVML device is read, by index and name.
    pub device: String,
}

impl ClockWatch {
    /// Starts reading the clock of the GPU at `ordinal` (see the module docs); why not where it
    /// cannot (no NVML, no such device, or [`GPU_CLOCK_ENV`] is `0`).
    pub fn start(ordinal: usize) -> Result<ClockWatch, String> {
        if std::env::var(GPU_CLOCK_ENV).is_ok_and(|v| v.trim() == "0") {
            return Err(format!("{GPU_CLOCK_ENV}=0"));
        }
        let (nvml, device) = Nvml::open(ordinal)?;
        let first = nvml.sm_clock().ok_or_else(|| format!("{device}: nvmlDeviceGetClockInfo failed"))?;
        let samples = Arc::new(Mutex::new(vec![(Instant::now(), first)]));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (Arc::clone(&samples), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("bench-gpu-clock".to_string())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::park_timeout(PERIOD);
                        if let Some(mhz) = nvml.sm_clock() {
                            samples.lock().unwrap_or_else(PoisonError::into_inner).push((Instant::now(), mhz));
                        }
                    }
                })
                .map_err(|e| format!("the clock thread did not start: {e}"))?
        };
        Ok(ClockWatch { samples, stop, thread: Some(thread), device })
    }

    /// The least and the most SM clock, in MHz, read from `from` to `to`, and the reading just
    /// before `from` (the clock the span began at).
    pub fn range(&self, from: Instant, to: Instant) -> Option<(u32, u32)> {
        let samples = self.samples.lock().unwrap_or_else(PoisonError::into_inner);
        span_range(&samples, from, to)
    }
}

/// [`ClockWatch::range`] over `samples` (in time order).
fn span_range(samples: &[(Instant, u32)], from: Instant, to: Instant) -> Option<(u32, u32)> {
    let first = samples.partition_point(|&(at, _)| at < from).saturating_sub(1);
    let within = samples.get(first..)?.iter().take_while(|&&(at, _)| at <= to).map(|&(_, mhz)| mhz);
    within.fold(None, |range, mhz| match range {
        None => Some((mhz, mhz)),
        Some((low, high)) => Some((low.min(mhz), high.max(mhz))),
    })
}

impl Drop for ClockWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_takes_the_reading_before_it_and_those_within() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let samples = [(at(0), 1980), (at(50), 345), (at(100), 1200), (at(150), 1980)];
        assert_eq!(span_range(&samples, at(60), at(120)), Some((345, 1200)), "345 held from 50 ms on");
        assert_eq!(span_range(&samples, at(10), at(20)), Some((1980, 1980)));
        assert_eq!(span_range(&samples, at(0), at(200)), Some((345, 1980)));
        assert_eq!(span_range(&samples, at(160), at(170)), Some((1980, 1980)), "past the last reading");
        assert_eq!(span_range(&[], at(0), at(10)), None);
    }

    #[test]
    fn the_watch_reads_a_clock_or_says_why_not() {
        match ClockWatch::start(0) {
            Ok(watch) => {
                std::thread::sleep(PERIOD * 3);
                let (low, high) = watch.range(Instant::now() - PERIOD * 2, Instant::now()).expect("readings");
                assert!(low <= high && high > 0, "{low}-{high} MHz");
                println!("{}: {low}-{high} MHz", watch.device);
            }
            Err(why) => {
                println!("not run: no GPU clock: {why}");
                assert!(!why.is_empty());
            }
        }
    }
}
