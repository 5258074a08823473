//! Rendering results: a text table, JSON, and an SVG bar chart of each workload against its baseline.

use std::fmt::Write;

use crate::scaling::{Cell, ScalingTable};
use crate::workloads::Row;

/// The widest line [`table`] aims for: workload names wrap to keep within it.
pub const TABLE_WIDTH: usize = 120;

/// A fixed-width table within [`TABLE_WIDTH`] columns: workload (wrapped), unit, HAL median
/// (p10-p90), baseline median with its key, ratio, and the target where any row has one (`ok` or
/// `MISSED`); then what each baseline key stands for.
pub fn table(rows: &[Row]) -> String {
    let mut baselines: Vec<&str> = Vec::new();
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|row| {
            let hal = format!("{:.2} ({:.2}-{:.2})", row.hal.median(), row.hal.p10(), row.hal.p90());
            let base = match &row.baseline {
                Some((name, b)) => {
                    let key = baselines.iter().position(|n| n == name).unwrap_or_else(|| {
                        baselines.push(name);
                        baselines.len() - 1
                    });
                    format!("{:.2} [{}]", b.median(), key + 1)
                }
                None => "-".to_string(),
            };
            let ratio = row.ratio().map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".to_string());
            [row.unit.to_string(), hal, base, ratio]
        })
        .collect();
    let header = ["unit", "hal median (p10-p90)", "baseline", "ratio"];
    let widths: Vec<usize> =
        (0..4).map(|i| cells.iter().map(|c| c[i].len()).chain([header[i].len()]).max().unwrap_or(0)).collect();
    let targets = rows.iter().any(|r| r.target.is_some());
    let target_w = if targets { rows.iter().map(|r| target_text(r).len()).max().unwrap_or(0) + 2 } else { 0 };
    let rest = widths.iter().sum::<usize>() + 2 * widths.len() + target_w;
    let longest = rows.iter().map(|r| r.name.len()).max().unwrap_or(8).max(8);
    let name_w = longest.min(TABLE_WIDTH.saturating_sub(rest).max(24));
    let line = |name: &str, cells: [&str; 4], target: &str| {
        let [unit, hal, base, ratio] = cells;
        let [unit_w, hal_w, base_w, ratio_w] = [widths[0], widths[1], widths[2], widths[3]];
        let text = format!("{name:<name_w$}  {unit:<unit_w$}  {hal:>hal_w$}  {base:>base_w$}  {ratio:>ratio_w$}");
        if targets { format!("{text}  {target}") } else { text }
    };
    let mut out = String::new();
    let _ = writeln!(out, "{}", line("workload", header, "target").trim_end());
    for (row, cells) in rows.iter().zip(&cells) {
        let mut names = wrap(&row.name, name_w).into_iter();
        let first = names.next().unwrap_or_default();
        let [unit, hal, base, ratio] = cells;
        let _ = writeln!(out, "{}", line(&first, [unit, hal, base, ratio], &target_text(row)).trim_end());
        for more in names {
            let _ = writeln!(out, "  {more}");
        }
    }
    for (key, name) in baselines.iter().enumerate() {
        let _ = writeln!(out, "baseline [{}]: {name}", key + 1);
    }
    let _ =
        write!(out, "(medians of {} trials, microseconds per unit)", rows.first().map_or(0, |r| r.hal.us_per_op.len()));
    out
}

/// The GPU's SM clock while the rows ran (`device` names where it was read, or why it was not):
/// the highest seen, then each row that ran below it at some point, with its least and most.
pub fn clock_lines(rows: &[Row], device: &str) -> String {
    let highest = rows.iter().filter_map(|r| r.sm_clock_mhz.map(|(_, high)| high)).max();
    let Some(highest) = highest else {
        return format!("GPU SM clock: {device}");
    };
    let lowered: Vec<&Row> = rows.iter().filter(|r| r.sm_clock_mhz.is_some_and(|(low, _)| low < highest)).collect();
    let mut out = format!("GPU SM clock ({device}): at most {highest} MHz");
    if lowered.is_empty() {
        out.push_str(", in every row");
        return out;
    }
    out.push_str("; rows that ran below it (least-most MHz while their trials ran):");
    for row in lowered {
        if let Some((low, high)) = row.sm_clock_mhz {
            let _ = write!(out, "\n  {low}-{high}  {}", row.name);
        }
    }
    out
}

/// `text` in lines of at most `width` characters, broken between words (a longer word stays
/// whole); the lines after the first are indented by two, so they have two fewer.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in text.split(' ') {
        let limit = if lines.is_empty() { width } else { width.saturating_sub(2) };
        if !current.is_empty() && current.len() + 1 + word.len() > limit {
            lines.push(std::mem::take(&mut current));
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(word);
    }
    lines.push(current);
    lines
}

/// `<= 1.25x ok`, `<= 1.25x MISSED`, or empty without a target.
pub fn target_text(row: &Row) -> String {
    match (row.target, row.meets_target()) {
        (Some(target), Some(true)) => format!("<= {target:.2}x ok"),
        (Some(target), Some(false)) => format!("<= {target:.2}x MISSED"),
        (Some(target), None) => format!("<= {target:.2}x (no baseline)"),
        (None, _) => String::new(),
    }
}

/// `value` formatted with `f`, or `-` where there is none.
fn or_dash(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".to_string(), f)
}

/// Submissions per second in thousands.
fn rate_text(cell: &Cell) -> String {
    match cell {
        Cell::Measured(samples) => {
            let k = |us: f64| 1e3 / us;
            format!("{:.1} ({:.1}-{:.1})", k(samples.median()), k(samples.p90()), k(samples.p10()))
        }
        Cell::Skipped(_) => "-".to_string(),
    }
}

/// One scaling table ([`crate::scaling`]) in the style of [`table`]: per thread count, the HAL's
/// and the raw baseline's submissions per second (thousands, median and p10-p90 across trials),
/// the HAL's speedup over one thread and its efficiency (speedup over threads), the raw
/// efficiency, the HAL/raw throughput ratio, and the verdict against the efficiency target where
/// both sides ran; a row not run says why at its end.
pub fn scaling_table(table: &ScalingTable) -> String {
    let header = [
        "threads",
        "hal ksub/s (p10-p90)",
        "raw ksub/s",
        "raw graph ksub/s",
        "speedup",
        "hal eff",
        "raw eff",
        "hal/raw",
        "target",
    ];
    let rate = |cell: &Option<Cell>| match cell {
        Some(Cell::Measured(samples)) => format!("{:.1}", 1e3 / samples.median()),
        Some(Cell::Skipped(why)) => why.clone(),
        None => "-".to_string(),
    };
    let cells: Vec<[String; 9]> = table
        .rows
        .iter()
        .map(|row| {
            let raw = rate(&row.raw);
            let target = match table.verdict(row) {
                Some(verdict) => verdict.text().to_string(),
                None => String::new(),
            };
            [
                row.threads.to_string(),
                rate_text(&row.hal),
                raw,
                rate(&row.raw_graph),
                or_dash(table.hal_speedup(row), |x| format!("{x:.2}x")),
                or_dash(table.hal_efficiency(row), |x| format!("{x:.2}")),
                or_dash(table.raw_efficiency(row), |x| format!("{x:.2}")),
                or_dash(table.ratio(row), |x| format!("{x:.2}x")),
                target,
            ]
        })
        .collect();
    let widths: Vec<usize> =
        (0..9).map(|i| cells.iter().map(|c| c[i].len()).chain([header[i].len()]).max().unwrap_or(0)).collect();
    let line = |cells: [&str; 9], note: &str| {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            if i == 8 {
                let _ = write!(text, "{cell:<width$}");
            } else {
                let _ = write!(text, "{cell:>width$}  ");
            }
        }
        if !note.is_empty() {
            let _ = write!(text, "  {note}");
        }
        text.trim_end().to_string()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "submission throughput, {} ({} queues, {} cores; a dependent chain of 1-dispatch executes per thread)",
        table.placement.name(),
        table.queue_count,
        table.cores
    );
    let _ = writeln!(out, "{}", line(header, ""));
    for (row, cells) in table.rows.iter().zip(&cells) {
        let note = match &row.hal {
            Cell::Skipped(why) => why.as_str(),
            Cell::Measured(_) => "",
        };
        let [a, b, c, d, e, f, g, h, i] = cells;
        let _ = writeln!(out, "{}", line([a, b, c, d, e, f, g, h, i], note));
    }
    let _ = write!(
        out,
        "raw: {}; target: hal eff >= {:.1} where threads <= cores and raw eff reaches it",
        table.raw,
        crate::scaling::TARGET_EFFICIENCY
    );
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The rows and the scaling tables as a JSON document: first `head` (the commit, the machine, the
/// command: [`crate::provenance`]), then the device, the trials per row, `extra` (date, mode, the
/// hygiene figures), the workloads and the scaling tables.
pub fn json(
    head: &[(&str, serde_json::Value)],
    device: &str,
    rows: &[Row],
    scaling: &[ScalingTable],
    extra: &[(String, String)],
) -> String {
    let mut out = String::from("{\n");
    for (k, v) in head {
        let _ = writeln!(out, "  {}: {},", json_str(k), v);
    }
    let _ = writeln!(out, "  \"device\": {},", json_str(device));
    let _ = writeln!(out, "  \"trials\": {},", rows.first().map_or(0, |r| r.hal.us_per_op.len()));
    for (k, v) in extra {
        let _ = writeln!(out, "  {}: {},", json_str(k), json_str(v));
    }
    out.push_str("  \"workloads\": [\n");
    for (i, row) in rows.iter().enumerate() {
        let _ = write!(
            out,
            "    {{\"name\": {}, \"unit\": {}, \"median\": {:.4}, \"p10\": {:.4}, \"p90\": {:.4}",
            json_str(&row.name),
            json_str(row.unit),
            row.hal.median(),
            row.hal.p10(),
            row.hal.p90()
        );
        if let Some((name, b)) = &row.baseline {
            let _ = write!(
                out,
                ", \"baseline\": {}, \"baseline_median\": {:.4}, \"ratio\": {:.4}",
                json_str(name),
                b.median(),
                row.hal.median() / b.median()
            );
        }
        if let Some((low, high)) = row.sm_clock_mhz {
            let _ = write!(out, ", \"sm_clock_mhz\": [{low}, {high}]");
        }
        if let Some(target) = row.target {
            let _ = write!(out, ", \"target\": {target:.2}");
            if let Some(met) = row.meets_target() {
                let _ = write!(out, ", \"meets_target\": {met}");
            }
        }
        out.push('}');
        out.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    out.push_str("  ],\n  \"scaling\": [\n");
    for (i, table) in scaling.iter().enumerate() {
        let _ = writeln!(
            out,
            "    {{\"placement\": {}, \"raw\": {}, \"queue_count\": {}, \"cores\": {}, \"rows\": [",
            json_str(table.placement.name()),
            json_str(&table.raw),
            table.queue_count,
            table.cores
        );
        for (j, row) in table.rows.iter().enumerate() {
            let _ = write!(out, "      {{\"threads\": {}", row.threads);
            let number = |value: Option<f64>| value.map_or_else(|| "null".to_string(), |v| format!("{v:.4}"));
            match &row.hal {
                Cell::Measured(_) => {
                    let _ = write!(out, ", \"hal_submissions_per_s\": {}", number(row.hal.rate()));
                }
                Cell::Skipped(why) => {
                    let _ = write!(out, ", \"hal_not_run\": {}", json_str(why));
                }
            }
            match &row.raw {
                Some(Cell::Measured(_)) => {
                    let rate = row.raw.as_ref().and_then(Cell::rate);
                    let _ = write!(out, ", \"raw_submissions_per_s\": {}", number(rate));
                }
                Some(Cell::Skipped(why)) => {
                    let _ = write!(out, ", \"raw_not_run\": {}", json_str(why));
                }
                None => {}
            }
            if let Some(rate) = row.raw_graph.as_ref().and_then(Cell::rate) {
                let _ = write!(out, ", \"raw_graph_submissions_per_s\": {}", number(Some(rate)));
            }
            let _ = write!(
                out,
                ", \"hal_speedup\": {}, \"hal_efficiency\": {}, \"raw_efficiency\": {}, \"ratio\": {}",
                number(table.hal_speedup(row)),
                number(table.hal_efficiency(row)),
                number(table.raw_efficiency(row)),
                number(table.ratio(row))
            );
            if let Some(verdict) = table.verdict(row) {
                let _ = write!(out, ", \"verdict\": {}", json_str(verdict.text()));
            }
            out.push('}');
            out.push_str(if j + 1 < table.rows.len() { ",\n" } else { "\n" });
        }
        out.push_str(if i + 1 < scaling.len() { "    ]},\n" } else { "    ]}\n" });
    }
    out.push_str("  ]\n}\n");
    out
}

/// A horizontal bar chart (log scale) of HAL medians beside baseline medians.
pub fn svg(title: &str, rows: &[Row]) -> String {
    let row_h = 38.0;
    let left = 400.0;
    let width = 1100.0;
    let plot_w = width - left - 200.0;
    let height = 60.0 + row_h * rows.len() as f64 + 30.0;
    let max = rows
        .iter()
        .flat_map(|r| std::iter::once(r.hal.median()).chain(r.baseline.as_ref().map(|(_, b)| b.median())))
        .fold(0.01f64, f64::max);
    let min = 0.01f64;
    let scale = |v: f64| ((v.max(min) / min).ln() / (max / min).ln() * plot_w).max(1.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="10" y="22" font-size="15">{}</text>"#, xml(title));
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="32" width="12" height="10" fill="#3b6fb6"/><text x="{}" y="41">hal (median, us, log scale)</text><rect x="{}" y="32" width="12" height="10" fill="#bbbbbb"/><text x="{}" y="41">baseline</text>"##,
        left + 16.0,
        left + 200.0,
        left + 216.0
    );
    let _ = writeln!(out, r#"<text x="{}" y="41">ratio (target)</text>"#, width - 190.0);
    for (i, row) in rows.iter().enumerate() {
        let y = 55.0 + row_h * i as f64;
        let _ = writeln!(out, r#"<text x="10" y="{}">{}</text>"#, y + 12.0, xml(&row.name));
        if let Some((name, _)) = &row.baseline {
            let _ = writeln!(
                out,
                r##"<text x="10" y="{}" font-size="10" fill="#666666">vs {}</text>"##,
                y + 25.0,
                xml(name)
            );
        }
        if let Some(ratio) = row.ratio() {
            let color = match row.meets_target() {
                Some(false) => "#b00020",
                Some(true) => "#1b7f3b",
                None => "#000000",
            };
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{}" fill="{color}">{ratio:.2}x {}</text>"##,
                width - 190.0,
                y + 17.0,
                xml(&target_text(row))
            );
        }
        let h = row.hal.median();
        let _ = writeln!(
            out,
            r##"<rect x="{left}" y="{y}" width="{:.1}" height="12" fill="#3b6fb6"/><text x="{:.1}" y="{}">{h:.2}</text>"##,
            scale(h),
            left + scale(h) + 4.0,
            y + 10.0
        );
        if let Some((_, b)) = &row.baseline {
            let b = b.median();
            let _ = writeln!(
                out,
                r##"<rect x="{left}" y="{}" width="{:.1}" height="12" fill="#bbbbbb"/><text x="{:.1}" y="{}">{b:.2}</text>"##,
                y + 14.0,
                scale(b),
                left + scale(b) + 4.0,
                y + 24.0
            );
        }
    }
    out.push_str("</svg>\n");
    out
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Samples;

    fn samples(us: f64) -> Samples {
        Samples::from_values(vec![us * 0.9, us, us * 1.1])
    }

    #[test]
    fn clock_lines_name_the_rows_that_ran_below_the_highest_clock() {
        let mut rows = rows();
        assert_eq!(clock_lines(&rows, "not read: no NVML"), "GPU SM clock: not read: no NVML");
        rows[0].sm_clock_mhz = Some((1980, 1980));
        rows[1].sm_clock_mhz = Some((345, 1980));
        rows[3].sm_clock_mhz = Some((345, 345));
        let text = clock_lines(&rows, "NVML device 0 'GPU'");
        assert!(
            text.starts_with("GPU SM clock (NVML device 0 'GPU'): at most 1980 MHz; rows that ran below"),
            "{text}"
        );
        assert!(text.contains("\n  345-1980  host signal -> released 1-dispatch work done"), "{text}");
        assert!(text.contains("\n  345-345  host round trip"), "{text}");
        assert!(!text.contains("binding table"), "a row at the highest clock is not listed: {text}");
        let json = json(&[], "d", &rows, &[], &[]);
        assert!(json.contains("\"sm_clock_mhz\": [345, 1980]"), "{json}");
        assert_eq!(json.matches("sm_clock_mhz").count(), 3, "only the rows with a clock: {json}");
        serde_json::from_str::<serde_json::Value>(&json).expect("valid JSON");
        rows[1].sm_clock_mhz = Some((1980, 1980));
        rows[3].sm_clock_mhz = None;
        assert!(clock_lines(&rows, "d").ends_with("at most 1980 MHz, in every row"));
    }

    fn rows() -> Vec<Row> {
        let long = "10-dispatch command buffer, binding table cycling over 16 buffers (submit 18.29)";
        vec![
            Row::new(
                long,
                "us/execute",
                samples(152.85),
                Some(("the same with fixed bindings (HAL, row above)", samples(32.74))),
            ),
            Row::new(
                "host signal -> released 1-dispatch work done",
                "us/release",
                samples(168.07),
                Some(("mutex+condvar round trip", samples(8.08))),
            ),
            Row::new("1-dispatch command buffer, chained", "us/execute", samples(28.15), None),
            Row::new(
                "host round trip",
                "us/round trip",
                samples(58.05),
                Some(("mutex+condvar round trip", samples(7.36))),
            ),
        ]
    }

    #[test]
    fn table_keeps_within_its_width_and_drops_an_empty_target_column() {
        let text = table(&rows());
        assert!(text.lines().all(|l| l.len() <= TABLE_WIDTH), "{text}");
        assert!(!text.contains("target"), "no row has a target: {text}");
        assert!(text.contains("binding table cycling over 16"), "{text}");
        // Each baseline is named once, under the table, by its key.
        assert_eq!(text.matches("mutex+condvar round trip").count(), 1, "{text}");
        assert!(text.contains("baseline [2]: mutex+condvar round trip\n"), "{text}");
        let round_trip = text.lines().find(|l| l.starts_with("host round trip")).unwrap();
        assert!(round_trip.contains("7.36 [2]") && round_trip.ends_with("7.89x"), "{round_trip}");
    }

    #[test]
    fn table_shows_targets_where_a_row_has_one() {
        let mut rows = rows();
        rows[1] = rows[1].clone().with_target(Some(1.25));
        let text = table(&rows);
        assert!(text.lines().all(|l| l.len() <= TABLE_WIDTH), "{text}");
        assert!(text.lines().next().unwrap().ends_with("  target"), "{text}");
        assert!(text.contains("20.80x  <= 1.25x MISSED"), "{text}");
    }

    #[test]
    fn scaling_table_shows_raw_efficiency_ratio_and_verdicts() {
        use crate::scaling::{Placement, ScalingRow};
        let cell = |us: f64| Cell::Measured(samples(us));
        let row = |threads, hal, raw| ScalingRow { threads, hal: cell(hal), raw: Some(cell(raw)), raw_graph: None };
        let table = ScalingTable {
            placement: Placement::OwnQueue,
            raw: "raw CUDA".to_string(),
            queue_count: 2,
            cores: 2,
            rows: vec![
                row(1, 4.0, 2.0),
                row(2, 4.0, 1.0),
                ScalingRow {
                    threads: 4,
                    hal: Cell::Skipped("not run: 4 queues".to_string()),
                    raw: Some(cell(0.5)),
                    raw_graph: None,
                },
            ],
        };
        let text = scaling_table(&table);
        let lines: Vec<&str> = text.lines().collect();
        // One thread: 250k/s beside raw's 500k/s, half the throughput.
        assert!(lines[2].contains("250.0 (") && lines[2].contains("500.0") && lines[2].ends_with("0.50x"), "{text}");
        // Two threads: no faster, while raw doubled.
        assert!(lines[3].contains(" 0.50 ") && lines[3].ends_with("MISSED"), "{text}");
        assert!(lines[4].ends_with("not run: 4 queues"), "{text}");
        let json = json(&[], "d", &[], std::slice::from_ref(&table), &[]);
        assert!(
            json.contains("\"verdict\": \"MISSED\"") && json.contains("\"hal_not_run\": \"not run: 4 queues\""),
            "{json}"
        );
        assert!(json.contains("\"raw_submissions_per_s\": 2000000.0000"), "{json}");
    }

    #[test]
    fn long_names_wrap_between_words() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        assert_eq!(wrap("unbreakable", 4), ["unbreakable"]);
    }
}
