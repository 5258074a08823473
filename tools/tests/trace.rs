//! `hal run --trace FILE` writes a timeline a trace viewer opens: this runs the built `hal` binary,
//! parses the file as JSON (serde_json, strict as the viewers) and checks its events.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// An object's fields as the checks below read them.
trait Fields {
    /// The string `key`, if there is one.
    fn str(&self, key: &str) -> Option<&str>;
    /// The number `key`, if there is one.
    fn num(&self, key: &str) -> Option<f64>;
}

impl Fields for Value {
    fn str(&self, key: &str) -> Option<&str> {
        self.get(key)?.as_str()
    }

    fn num(&self, key: &str) -> Option<f64> {
        self.get(key)?.as_f64()
    }
}

#[test]
fn run_trace_is_valid_json_with_spans_on_both_queues() {
    let path = std::env::temp_dir().join(format!("hal-trace-test-{}.json", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_hal"))
        .args(["run", "--size", "64", "--steps", "12", "--window", "4", "--trace"])
        .arg(&path)
        .output()
        .expect("run the hal binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "hal run failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("check:        PASS"), "{stdout}");

    let text = std::fs::read_to_string(&path).expect("the trace file was written");
    let _ = std::fs::remove_file(&path);
    let trace: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("the trace is not valid JSON: {e}"));
    let events = trace["traceEvents"].as_array().expect("a traceEvents array");

    // Every event has what the viewers need.
    for event in events {
        let ph = event.str("ph").expect("ph");
        assert!(event.str("name").is_some() && event.num("pid").is_some(), "{event:?}");
        if ph != "M" {
            assert!(event.num("ts").is_some_and(|ts| ts >= 0.0), "{event:?}");
        }
        if ph == "X" {
            assert!(event.num("dur").is_some_and(|d| d >= 0.0) && event.num("tid").is_some(), "{event:?}");
        }
    }

    // The HAL's spans, by name, on which queues (tids).
    let mut queues: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
    for event in events.iter().filter(|e| e.str("ph") == Some("X")) {
        let name = event.str("name").unwrap();
        if ["submit", "issue", "complete"].contains(&name) {
            queues.entry(name).or_default().insert(event.num("tid").unwrap() as u64);
            let args = event.get("args").expect("args");
            assert!(args.str("op").is_some(), "span without its op field: {event:?}");
            if name != "submit" {
                assert!(args.num("action").is_some(), "{name} span without its action field: {event:?}");
            }
        }
    }
    for name in ["submit", "issue", "complete"] {
        let seen = queues.get(name).cloned().unwrap_or_default();
        assert!(seen.is_superset(&BTreeSet::from([0, 1])), "'{name}' spans on queues {seen:?}, want 0 and 1");
    }

    // Per-submission slices: 12 stencils and 12 halos per queue, which never overlap on one queue.
    for queue in [0u64, 1] {
        let mut slices: Vec<(f64, f64, &str)> = events
            .iter()
            .filter(|e| e.str("ph") == Some("X") && e.num("pid") == Some(1.0) && e.num("tid") == Some(queue as f64))
            .map(|e| (e.num("ts").unwrap(), e.num("dur").unwrap(), e.str("name").unwrap()))
            .collect();
        assert_eq!(slices.iter().filter(|s| s.2.starts_with("stencil ")).count(), 12, "queue {queue}");
        assert_eq!(slices.iter().filter(|s| s.2.starts_with("halo ")).count(), 12, "queue {queue}");
        slices.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Slices are stamped by listeners on the timelines. The listeners woken by one retirement
        // pass are told after the pass (never under its lock), so an end stamp may trail the value
        // by the rest of that pass while the next slice's start, released by the other queue, is
        // stamped at once: allow that much (a pass is microseconds; 1 ms covers a loaded machine).
        const PASS_SLACK_US: f64 = 1_000.0;
        for pair in slices.windows(2) {
            assert!(
                pair[0].0 + pair[0].1 <= pair[1].0 + PASS_SLACK_US,
                "overlapping slices on queue {queue}: {pair:?}"
            );
        }
    }

    // Device timestamps (pid 6): per queue, the operations track (tid 2q) holds every submission's
    // slice (2 uploads, 12 stencil executes, 12 halo copies, 1 readback), and the dispatches track
    // (tid 2q + 1) the 12 stencil dispatches, named by their entry point, each inside its execute.
    for queue in [0u64, 1] {
        let on = |tid: u64| -> Vec<&Value> {
            events
                .iter()
                .filter(|e| e.str("ph") == Some("X") && e.num("pid") == Some(6.0) && e.num("tid") == Some(tid as f64))
                .collect()
        };
        let (operations, dispatches) = (on(2 * queue), on(2 * queue + 1));
        let count = |name: &str| operations.iter().filter(|e| e.str("name") == Some(name)).count();
        assert_eq!((count("write"), count("execute"), count("copy"), count("read")), (2, 12, 12, 1), "queue {queue}");
        assert_eq!(dispatches.len(), 12, "queue {queue}: {dispatches:?}");
        for dispatch in &dispatches {
            assert_eq!(dispatch.str("name"), Some("jacobi_step"), "{dispatch:?}");
            let args = dispatch.get("args").expect("args");
            assert!(args.num("command").is_some() && args.str("workgroups").is_some(), "{dispatch:?}");
            let action = args.num("action").expect("action");
            let execute = operations
                .iter()
                .find(|e| e.get("args").and_then(|a| a.num("action")) == Some(action))
                .unwrap_or_else(|| panic!("no execute for {dispatch:?}"));
            let (start, end) =
                (dispatch.num("ts").unwrap(), dispatch.num("ts").unwrap() + dispatch.num("dur").unwrap());
            let (outer_start, outer_end) =
                (execute.num("ts").unwrap(), execute.num("ts").unwrap() + execute.num("dur").unwrap());
            assert!(start + 2.0 >= outer_start && end <= outer_end + 2.0, "{dispatch:?} outside {execute:?}");
        }
    }
    let tracks: BTreeSet<&str> = events
        .iter()
        .filter(|e| e.str("name") == Some("thread_name") && e.num("pid") == Some(6.0))
        .filter_map(|e| e.get("args")?.str("name"))
        .collect();
    assert_eq!(
        tracks,
        BTreeSet::from(["queue 0 operations", "queue 0 dispatches", "queue 1 operations", "queue 1 dispatches"])
    );

    // Semaphore counters: both queue timelines climb to their last value (2 uploads + 2 per step + 1).
    // Streamed as recorded, so in file order only roughly by time: viewers order events by `ts`.
    let mut counters: Vec<&Value> = events.iter().filter(|e| e.str("ph") == Some("C")).collect();
    counters.sort_by(|a, b| a.num("ts").unwrap().total_cmp(&b.num("ts").unwrap()));
    let mut last: BTreeMap<&str, f64> = BTreeMap::new();
    for event in counters {
        let value = event.get("args").and_then(|a| a.num("value")).expect("counter value");
        let previous = last.insert(event.str("name").unwrap(), value);
        assert!(previous.is_none_or(|p| p < value), "counter went backwards: {event:?}");
    }
    assert_eq!(last.len(), 2, "{last:?}");
    assert!(last.values().all(|&v| v == 27.0), "{last:?}");
}
