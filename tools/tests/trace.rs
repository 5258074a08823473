//! `hal run --trace FILE` writes a timeline a trace viewer opens: this runs the built `hal` binary,
//! parses the file as JSON (a small strict parser below, no dependency) and checks its events.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(f64),
    String(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(map) => map.get(key),
            _ => None,
        }
    }

    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    fn num(&self, key: &str) -> Option<f64> {
        match self.get(key)? {
            Json::Number(n) => Some(*n),
            _ => None,
        }
    }
}

/// A strict parser of one JSON document (RFC 8259), enough to reject anything a viewer would.
struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn parse(text: &str) -> Result<Json, String> {
        let mut parser = Parser { bytes: text.as_bytes(), at: 0 };
        let value = parser.value()?;
        parser.space();
        if parser.at != parser.bytes.len() {
            return Err(format!("trailing characters at byte {}", parser.at));
        }
        Ok(value)
    }

    fn space(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| b" \t\r\n".contains(b)) {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        self.space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", byte as char, self.at))
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(format!("bad literal at byte {}", self.at))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.space();
        match self.bytes.get(self.at) {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(format!("unexpected input at byte {}", self.at)),
        }
    }

    fn object(&mut self) -> Result<Json, String> {
        self.expect(b'{')?;
        let mut map = BTreeMap::new();
        self.space();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Json::Object(map));
        }
        loop {
            self.space();
            let key = self.string()?;
            self.expect(b':')?;
            map.insert(key, self.value()?);
            self.space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Json::Object(map));
                }
                _ => return Err(format!("expected ',' or '}}' at byte {}", self.at)),
            }
        }
    }

    fn array(&mut self) -> Result<Json, String> {
        self.expect(b'[')?;
        let mut items = Vec::new();
        self.space();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(format!("expected ',' or ']' at byte {}", self.at)),
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let Some(&byte) = self.bytes.get(self.at) else { return Err("unterminated string".into()) };
            self.at += 1;
            match byte {
                b'"' => return Ok(out),
                b'\\' => {
                    let escape = *self.bytes.get(self.at).ok_or("unterminated escape")?;
                    self.at += 1;
                    match escape {
                        b'"' | b'\\' | b'/' => out.push(escape as char),
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        b'r' => out.push('\r'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'u' => {
                            let hex = std::str::from_utf8(self.bytes.get(self.at..self.at + 4).ok_or("short \\u")?)
                                .map_err(|e| e.to_string())?;
                            let code = u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                            out.push(char::from_u32(code).ok_or("bad \\u escape")?);
                            self.at += 4;
                        }
                        other => return Err(format!("bad escape '\\{}'", other as char)),
                    }
                }
                0..0x20 => return Err(format!("raw control character in a string at byte {}", self.at - 1)),
                _ => {
                    // Copy the whole UTF-8 sequence.
                    let start = self.at - 1;
                    let mut end = self.at;
                    while self.bytes.get(end).is_some_and(|b| b & 0xC0 == 0x80) {
                        end += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.bytes[start..end]).map_err(|e| e.to_string())?);
                    self.at = end;
                }
            }
        }
    }

    fn number(&mut self) -> Result<Json, String> {
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(|b| b"+-.eE0123456789".contains(b)) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).map_err(|e| e.to_string())?;
        let ok = !text.starts_with('+') && !text.starts_with("-.") && !text.ends_with('.');
        match text.parse::<f64>() {
            Ok(n) if ok && n.is_finite() => Ok(Json::Number(n)),
            _ => Err(format!("bad number '{text}' at byte {start}")),
        }
    }
}

#[test]
fn parser_accepts_json_and_rejects_near_misses() {
    let value = Parser::parse(r#"{"a": [1, -2.5e3, true, null, "x\"\u0041é"], "b": {}}"#).unwrap();
    assert_eq!(
        value.get("a"),
        Some(&Json::Array(vec![
            Json::Number(1.0),
            Json::Number(-2500.0),
            Json::Bool(true),
            Json::Null,
            Json::String("x\"Aé".into())
        ]))
    );
    for bad in ["{\"a\":1,}", "[1 2]", "{\"a\" 1}", "\"tab\there\"", "[1.]", "{} x", "[NaN]"] {
        assert!(Parser::parse(bad).is_err(), "accepted {bad}");
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
    let trace = Parser::parse(&text).unwrap_or_else(|e| panic!("the trace is not valid JSON: {e}"));
    let Some(Json::Array(events)) = trace.get("traceEvents") else { panic!("no traceEvents array") };

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
        let on = |tid: u64| -> Vec<&Json> {
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
    assert!(text.contains("\"queue 1 dispatches\""), "the dispatch tracks are named");

    // Semaphore counters: both queue timelines climb to their last value (2 uploads + 2 per step + 1).
    // Streamed as recorded, so in file order only roughly by time: viewers order events by `ts`.
    let mut counters: Vec<&Json> = events.iter().filter(|e| e.str("ph") == Some("C")).collect();
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
