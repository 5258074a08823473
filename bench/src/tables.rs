//! The tables of `docs/benchmarks.md`, rendered from the result files in `bench/results/` (the
//! bench's `--json` output, one file per target). Each table sits between two markers:
//!
//! ```text
//! <!-- generated from bench/results/cpu-sim.json: do not edit -->
//! ...
//! <!-- end -->
//! ```
//!
//! [`render_doc`] replaces what lies between every pair with the table of the file the first
//! marker names, or, while that file does not exist, with a line giving the command that produces
//! it. `cargo run -p bench --bin bench-tables` writes the result into the doc; `--check`, and the
//! test `bench/tests/tables.rs`, fail where the doc differs from it. A result file must carry the
//! commit and the machine it was measured on ([`validate`]).

use std::fmt::Write;
use std::path::Path;

use serde_json::Value;

/// The first marker of a generated section, before the result file's path.
pub const START: &str = "<!-- generated from ";
/// The first marker's end, after the result file's path.
pub const START_END: &str = ": do not edit -->";
/// The marker that ends a generated section.
pub const END: &str = "<!-- end -->";

/// A target the doc has a table for: its result file's name (without `.json`), the command that
/// produces the file, and where that command runs.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// `bench/results/<name>.json`.
    pub name: &'static str,
    /// The command that writes the file.
    pub command: &'static str,
    /// Where and how it runs.
    pub note: &'static str,
}

/// The targets `docs/benchmarks.md` has a table for.
pub const TARGETS: [Target; 4] = [
    Target {
        name: "h200-cuda",
        command: "bench --driver cuda --json bench/results/h200-cuda.json",
        note: "on an H200 machine, with the bench binary that `bash scripts/device/kit.sh` builds",
    },
    Target {
        name: "h200-vulkan",
        command: "bench --driver vulkan --json bench/results/h200-vulkan.json",
        note: "on an H200 machine, with the bench binary that `bash scripts/device/kit.sh` builds",
    },
    Target {
        name: "lavapipe",
        command: "cargo run --release -p bench -- --driver vulkan --quick --json bench/results/lavapipe.json",
        note: "on a machine whose only Vulkan device is lavapipe",
    },
    Target {
        name: "cpu-sim",
        command: "cargo run --release -p bench -- --driver cpu-sim --json bench/results/cpu-sim.json",
        note: "",
    },
];

/// How to produce `bench/results/<name>.json`: the command in code, then where it runs.
pub fn command_for(name: &str) -> String {
    match TARGETS.iter().find(|t| t.name == name) {
        Some(t) if t.note.is_empty() => format!("`{}`", t.command),
        Some(t) => format!("`{}` ({})", t.command, t.note),
        None => format!("`cargo run --release -p bench -- --driver DRIVER --json bench/results/{name}.json`"),
    }
}

/// `Ok` where `file` (a parsed result file) names the commit (`commit.hash`, `commit.dirty`) and
/// the machine (`machine.cpu`, `cores`, `os`, `kernel`, `driver`, `device`, `driver_version`) and
/// has its workloads; otherwise what is missing.
pub fn validate(file: &Value) -> Result<(), String> {
    let mut missing = Vec::new();
    match file.pointer("/commit/hash").and_then(Value::as_str) {
        Some(hash) if !hash.is_empty() => {}
        _ => missing.push("commit.hash"),
    }
    if !matches!(file.pointer("/commit/dirty"), Some(Value::Bool(_) | Value::Null)) {
        missing.push("commit.dirty");
    }
    for key in ["cpu", "os", "kernel", "driver", "device"] {
        if file.pointer(&format!("/machine/{key}")).and_then(Value::as_str).is_none_or(str::is_empty) {
            missing.push(match key {
                "cpu" => "machine.cpu",
                "os" => "machine.os",
                "kernel" => "machine.kernel",
                "driver" => "machine.driver",
                _ => "machine.device",
            });
        }
    }
    if file.pointer("/machine/cores").and_then(Value::as_u64).is_none_or(|c| c == 0) {
        missing.push("machine.cores");
    }
    if !matches!(file.pointer("/machine/driver_version"), Some(Value::String(_) | Value::Null)) {
        missing.push("machine.driver_version");
    }
    if file.get("workloads").and_then(Value::as_array).is_none() {
        missing.push("workloads");
    }
    if missing.is_empty() { Ok(()) } else { Err(format!("no {}", missing.join(", "))) }
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

/// A table cell: `|` escaped, no line breaks.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The command a result file records, as a reader would type it: each word that is a path shown by
/// its file name (where the binary and its output lay on the machine that measured is not the
/// reader's business, and the file name says which result it is).
fn shown_command(command: &str) -> String {
    command.split_whitespace().map(|word| word.rsplit('/').next().unwrap_or(word)).collect::<Vec<_>>().join(" ")
}

/// The Markdown of one result file: what measured it (command, mode, commit, machine,
/// device), the workload table, the hygiene figures and the scaling tables.
pub fn render(file: &Value) -> Result<String, String> {
    validate(file)?;
    let machine = &file["machine"];
    let mut out = String::new();
    let mode = text(file, "mode");
    let trials = file.get("trials").and_then(Value::as_u64).unwrap_or(0);
    let _ = writeln!(
        out,
        "Measured by `{}` ({} run, {} timed trials a row).",
        shown_command(text(file, "command")),
        if mode.is_empty() { "unknown" } else { mode },
        trials
    );
    out.push('\n');
    out.push_str("| | |\n| --- | --- |\n");
    let hash = text(&file["commit"], "hash");
    let dirty = match file.pointer("/commit/dirty") {
        Some(Value::Bool(true)) => " (tracked files differed from it)",
        Some(Value::Bool(false)) => "",
        _ => " (unknown whether tracked files differed)",
    };
    let short = if hash.len() > 12 && hash.chars().all(|c| c.is_ascii_hexdigit()) { &hash[..12] } else { hash };
    let _ = writeln!(out, "| commit | `{short}`{dirty} |");
    let load = machine
        .get("load_average")
        .and_then(Value::as_str)
        .map_or(String::new(), |l| format!("; load average {l} when the run started"));
    let _ = writeln!(
        out,
        "| machine | {}, {} cores, {}, {}{} |",
        cell(text(machine, "cpu")),
        machine["cores"],
        cell(text(machine, "os")),
        cell(text(machine, "kernel")),
        cell(&load)
    );
    let version = machine.get("driver_version").and_then(Value::as_str).unwrap_or("not reported");
    let _ = writeln!(
        out,
        "| device | {} '{}', driver version {} |",
        cell(text(machine, "driver")),
        cell(text(machine, "device")),
        cell(version)
    );
    let properties = text(file, "properties");
    if !properties.is_empty() {
        let _ = writeln!(out, "| device properties | {} |", cell(properties));
    }
    let workloads = file["workloads"].as_array().map(Vec::as_slice).unwrap_or_default();
    if !workloads.is_empty() {
        // The GPU's SM clock during each row, where the run read it.
        let clocks = workloads.iter().any(|w| w.get("sm_clock_mhz").is_some());
        out.push('\n');
        out.push_str(
            "| workload | unit | HAL median (p10-p90), us | baseline | baseline median, us | ratio | target |",
        );
        out.push_str(if clocks { " SM clock, MHz |\n" } else { "\n" });
        out.push_str("| --- | --- | ---: | --- | ---: | ---: | --- |");
        out.push_str(if clocks { " ---: |\n" } else { "\n" });
        for w in workloads {
            let f2 = |key: &str| number(w, key).map_or("-".to_string(), |x| format!("{x:.2}"));
            let target = match (number(w, "target"), w.get("meets_target").and_then(Value::as_bool)) {
                (Some(t), Some(true)) => format!("<= {t:.2}x met"),
                (Some(t), Some(false)) => format!("<= {t:.2}x **missed**"),
                (Some(t), None) => format!("<= {t:.2}x"),
                (None, _) => String::new(),
            };
            let clock = match w.get("sm_clock_mhz").and_then(Value::as_array).map(Vec::as_slice) {
                Some([low, high]) if low == high => format!(" {low} |"),
                Some([low, high]) => format!(" {low}-{high} |"),
                _ if clocks => " - |".to_string(),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} ({}-{}) | {} | {} | {} | {} |{clock}",
                cell(text(w, "name")),
                cell(text(w, "unit")),
                f2("median"),
                f2("p10"),
                f2("p90"),
                cell(w.get("baseline").and_then(Value::as_str).unwrap_or("-")),
                f2("baseline_median"),
                number(w, "ratio").map_or("-".to_string(), |x| format!("{x:.2}x")),
                target
            );
        }
    }
    let allocations = text(file, "allocations_per_submission");
    let long_run = text(file, "long_run");
    if !allocations.is_empty() || !long_run.is_empty() {
        out.push('\n');
    }
    if !allocations.is_empty() {
        let _ = writeln!(
            out,
            "- heap allocations per steady-state submission: {allocations} (the bench's own idle polling, {}, left out)",
            text(file, "allocations_by_idle_polling_left_out")
        );
        let by_workload = text(file, "allocations_by_workload");
        if !by_workload.is_empty() {
            let _ = writeln!(out, "- heap allocations per submission in bursts the host waits for: {by_workload}");
        }
    }
    if !long_run.is_empty() {
        let _ = writeln!(out, "- long run: {}", cell(long_run));
    }
    let placement = text(file, "placement");
    if !placement.is_empty() {
        let _ = writeln!(out, "- {}", cell(placement));
    }
    let clock = text(file, "sm_clock");
    if !clock.is_empty() {
        let _ = writeln!(out, "- SM clock read from: {}", cell(clock));
    }
    for table in file.get("scaling").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        render_scaling(&mut out, table);
    }
    Ok(out)
}

fn render_scaling(out: &mut String, table: &Value) {
    let rows = table["rows"].as_array().map(Vec::as_slice).unwrap_or_default();
    let graph = rows.iter().any(|r| r.get("raw_graph_submissions_per_s").is_some());
    let _ = writeln!(
        out,
        "\nScaling, {} ({} queues, {} cores; raw: {}), thousands of submissions a second:\n",
        text(table, "placement"),
        table["queue_count"],
        table["cores"],
        cell(text(table, "raw"))
    );
    out.push_str("| threads | HAL | raw |");
    out.push_str(if graph { " raw graph |" } else { "" });
    out.push_str(" HAL speedup | HAL eff. | raw eff. | HAL/raw | target |\n");
    out.push_str("| ---: | ---: | ---: |");
    out.push_str(if graph { " ---: |" } else { "" });
    out.push_str(" ---: | ---: | ---: | ---: | --- |\n");
    for row in rows {
        let rate =
            |measured: &str, skipped: &str| match (number(row, measured), row.get(skipped).and_then(Value::as_str)) {
                (Some(r), _) => format!("{:.1}", r / 1e3),
                (None, Some(why)) => cell(why),
                (None, None) => "-".to_string(),
            };
        let f = |key: &str, suffix: &str| number(row, key).map_or("-".to_string(), |x| format!("{x:.2}{suffix}"));
        let _ = write!(
            out,
            "| {} | {} | {} |",
            row["threads"],
            rate("hal_submissions_per_s", "hal_not_run"),
            rate("raw_submissions_per_s", "raw_not_run")
        );
        if graph {
            let _ = write!(out, " {} |", rate("raw_graph_submissions_per_s", ""));
        }
        let _ = writeln!(
            out,
            " {} | {} | {} | {} | {} |",
            f("hal_speedup", "x"),
            f("hal_efficiency", ""),
            f("raw_efficiency", ""),
            f("ratio", "x"),
            cell(text(row, "verdict"))
        );
    }
}

/// What goes between the markers of `bench/results/<name>.json`, read from `results` (the
/// directory): its table, or, where the file does not exist, the command that produces it.
pub fn render_target(results: &Path, name: &str) -> Result<String, String> {
    let path = results.join(format!("{name}.json"));
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(format!("No result file yet: run {}.\n", command_for(name)));
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let file: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    render(&file).map_err(|e| format!("{}: {e}", path.display()))
}

/// The names of the result files in `results` (`*.json`, without the extension), sorted.
pub fn result_names(results: &Path) -> Result<Vec<String>, String> {
    let entries = std::fs::read_dir(results).map_err(|e| format!("{}: {e}", results.display()))?;
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string))
        .collect();
    names.sort();
    Ok(names)
}

/// `doc` with every generated section rendered anew from `results`. Fails where a start marker
/// has no end, names a file outside `bench/results/`, or a result file has no section, is not
/// JSON, or lacks the commit or the machine.
pub fn render_doc(doc: &str, results: &Path) -> Result<String, String> {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    let mut sections = Vec::new();
    while let Some(at) = rest.find(START) {
        let after = &rest[at + START.len()..];
        let line_end = after.find('\n').ok_or("a generated-section marker ends the doc")?;
        let path = after[..line_end]
            .strip_suffix(START_END)
            .ok_or_else(|| format!("marker `{START}{}` does not end in `{START_END}`", &after[..line_end]))?;
        let name = path
            .strip_prefix("bench/results/")
            .and_then(|p| p.strip_suffix(".json"))
            .ok_or_else(|| format!("marker names {path}, not bench/results/NAME.json"))?;
        let body = &after[line_end + 1..];
        let end = body.find(END).ok_or_else(|| format!("the section of {path} has no `{END}`"))?;
        out.push_str(&rest[..at + START.len() + line_end + 1]);
        out.push_str(&render_target(results, name)?);
        out.push_str(END);
        rest = &body[end + END.len()..];
        sections.push(name.to_string());
    }
    out.push_str(rest);
    let orphans: Vec<String> = result_names(results)?.into_iter().filter(|n| !sections.contains(n)).collect();
    if !orphans.is_empty() {
        return Err(format!("result files with no section in the doc: {}", orphans.join(", ")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> Value {
        json!({
            "commit": {"hash": "0123456789abcdef0123456789abcdef01234567", "dirty": false},
            "machine": {"cpu": "CPU", "cores": 2, "os": "OS", "kernel": "Linux 6", "driver": "cpu-sim",
                        "device": "cpu-sim", "driver_version": null},
            "command": "bench --json x.json",
            "device": "cpu-sim 'cpu-sim'",
            "trials": 15,
            "unix_time": "1764374400",
            "mode": "full",
            "properties": "a=1",
            "workloads": [
                {"name": "a | b", "unit": "us/op", "median": 1.0, "p10": 0.5, "p90": 2.0,
                 "baseline": "base", "baseline_median": 0.5, "ratio": 2.0, "target": 1.25, "meets_target": false},
                {"name": "c", "unit": "us/op", "median": 3.0, "p10": 3.0, "p90": 3.0}
            ],
            "allocations_per_submission": "0.00",
            "allocations_by_idle_polling_left_out": "1",
            "long_run": "1000 chained submissions",
            "scaling": [{"placement": "each thread on its own queue", "raw": "none", "queue_count": 2, "cores": 2,
                         "rows": [{"threads": 1, "hal_submissions_per_s": 2000.0, "hal_speedup": 1.0,
                                   "hal_efficiency": 1.0, "raw_efficiency": null, "ratio": null}]}]
        })
    }

    #[test]
    fn renders_provenance_workloads_and_scaling() {
        let text = render(&file()).unwrap();
        assert!(text.starts_with("Measured by `bench --json x.json` (full run, 15 timed trials a row).\n"), "{text}");
        assert!(text.contains("| commit | `0123456789ab` |"), "{text}");
        assert!(text.contains("| machine | CPU, 2 cores, OS, Linux 6 |"), "{text}");
        assert!(text.contains("driver version not reported"), "{text}");
        assert!(
            text.contains("| a \\| b | us/op | 1.00 (0.50-2.00) | base | 0.50 | 2.00x | <= 1.25x **missed** |"),
            "{text}"
        );
        assert!(text.contains("| c | us/op | 3.00 (3.00-3.00) | - | - | - |  |"), "{text}");
        assert!(text.contains("| 1 | 2.0 | - | 1.00x | 1.00 | - | - |  |"), "{text}");
    }

    #[test]
    fn rows_with_an_sm_clock_get_its_column() {
        let mut f = file();
        f["workloads"][0]["sm_clock_mhz"] = json!([345, 1980]);
        f["sm_clock"] = json!("NVML device 0 'GPU'");
        f["placement"] = json!("threads: kept off CPUs 14 (they take the GPU's interrupts)");
        let text = render(&f).unwrap();
        assert!(text.contains("| ratio | target | SM clock, MHz |\n| --- |"), "{text}");
        assert!(text.contains("| 2.00x | <= 1.25x **missed** | 345-1980 |"), "{text}");
        assert!(text.contains("| c | us/op | 3.00 (3.00-3.00) | - | - | - |  | - |"), "{text}");
        assert!(text.contains("- SM clock read from: NVML device 0 'GPU'"), "{text}");
        assert!(text.contains("- threads: kept off CPUs 14 (they take the GPU's interrupts)"), "{text}");
        f["workloads"][1]["sm_clock_mhz"] = json!([1980, 1980]);
        assert!(render(&f).unwrap().contains("|  | 1980 |"), "one value where the clock held");
        assert!(!render(&file()).unwrap().contains("SM clock"), "a file without clocks has no column");
    }

    #[test]
    fn a_file_without_commit_or_machine_is_refused() {
        let mut f = file();
        f.as_object_mut().unwrap().remove("commit");
        assert_eq!(validate(&f), Err("no commit.hash, commit.dirty".to_string()));
        let mut f = file();
        f["machine"].as_object_mut().unwrap().remove("cpu");
        f["machine"]["cores"] = json!(0);
        assert_eq!(render(&f), Err("no machine.cpu, machine.cores".to_string()));
    }

    #[test]
    fn sections_are_replaced_and_a_missing_file_gives_its_command() {
        let dir = std::env::temp_dir().join(format!("bench-tables-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpu-sim.json"), file().to_string()).unwrap();
        let doc = "intro\n<!-- generated from bench/results/cpu-sim.json: do not edit -->\nstale\n<!-- end -->\n\
                   mid\n<!-- generated from bench/results/h200-cuda.json: do not edit -->\n<!-- end -->\nend\n";
        let out = render_doc(doc, &dir).unwrap();
        assert!(out.starts_with("intro\n<!-- generated from bench/results/cpu-sim.json: do not edit -->\nMeasured by"));
        assert!(!out.contains("stale"));
        assert!(
            out.contains(
                "No result file yet: run `bench --driver cuda --json bench/results/h200-cuda.json` (on an H200"
            )
        );
        assert!(out.ends_with("<!-- end -->\nend\n"));
        // Rendering is a fixed point, and a file without a section is an error.
        assert_eq!(render_doc(&out, &dir).unwrap(), out);
        std::fs::write(dir.join("extra.json"), "{}").unwrap();
        assert_eq!(render_doc(doc, &dir), Err("result files with no section in the doc: extra".to_string()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn commands_show_file_names_not_paths() {
        assert_eq!(
            shown_command("./kit/bench --driver cuda --json /root/out/h200-cuda.json"),
            "bench --driver cuda --json h200-cuda.json"
        );
        assert_eq!(shown_command("bench --quick"), "bench --quick");
    }
}
