//! Rendering results: a text table, JSON, and an SVG bar chart of each workload against its baseline.

use std::fmt::Write;

use crate::workloads::Row;

/// A fixed-width table: workload, unit, HAL median (p10-p90), baseline median and what it is, ratio,
/// and the target where the row has one (`ok` or `MISSED`).
pub fn table(rows: &[Row]) -> String {
    let name_w = rows.iter().map(|r| r.name.len()).max().unwrap_or(8).max(8);
    let base_w = rows.iter().filter_map(|r| r.baseline.as_ref().map(|(n, _)| n.len())).max().unwrap_or(11).max(11);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<name_w$}  {:<13} {:>24} {:>10}  {:<base_w$} {:>7}  target",
        "workload", "unit", "hal median (p10-p90)", "baseline", "baseline is", "ratio"
    );
    for row in rows {
        let hal = format!("{:.2} ({:.2}-{:.2})", row.hal.median(), row.hal.p10(), row.hal.p90());
        let (base, base_name) = match &row.baseline {
            Some((name, b)) => (format!("{:.2}", b.median()), *name),
            None => ("-".to_string(), "-"),
        };
        let ratio = row.ratio().map(|r| format!("{r:.2}x")).unwrap_or_else(|| "-".to_string());
        let _ = writeln!(
            out,
            "{:<name_w$}  {:<13} {:>24} {:>10}  {:<base_w$} {:>7}  {}",
            row.name,
            row.unit,
            hal,
            base,
            base_name,
            ratio,
            target_text(row)
        );
    }
    let _ =
        write!(out, "(medians of {} trials, microseconds per unit)", rows.first().map_or(0, |r| r.hal.us_per_op.len()));
    out
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

/// The rows as a JSON document with the device and date.
pub fn json(device: &str, rows: &[Row], extra: &[(String, String)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{{\n  \"device\": {},", json_str(device));
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
        if let Some(target) = row.target {
            let _ = write!(out, ", \"target\": {target:.2}");
            if let Some(met) = row.meets_target() {
                let _ = write!(out, ", \"meets_target\": {met}");
            }
        }
        out.push('}');
        out.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
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
