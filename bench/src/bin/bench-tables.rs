//! `bench-tables`: renders the tables of `docs/benchmarks.md` from `bench/results/*.json`
//! ([`bench::tables`]). `cargo run -p bench --bin bench-tables` rewrites the doc's generated
//! sections; with `--check` it changes nothing and exits with status 1 where the doc differs from
//! what the result files render (the test `bench/tests/tables.rs` checks the same).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let check = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("--check") => true,
        Some(_) => {
            eprintln!("usage: bench-tables [--check]");
            return ExitCode::from(2);
        }
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc_path = root.join("docs/benchmarks.md");
    let doc = match std::fs::read_to_string(&doc_path) {
        Ok(doc) => doc,
        Err(e) => {
            eprintln!("bench-tables: {}: {e}", doc_path.display());
            return ExitCode::FAILURE;
        }
    };
    let rendered = match bench::tables::render_doc(&doc, &root.join("bench/results")) {
        Ok(rendered) => rendered,
        Err(e) => {
            eprintln!("bench-tables: {e}");
            return ExitCode::FAILURE;
        }
    };
    if rendered == doc {
        eprintln!("bench-tables: docs/benchmarks.md is up to date");
        return ExitCode::SUCCESS;
    }
    if check {
        eprintln!(
            "bench-tables: docs/benchmarks.md differs from bench/results/: run `cargo run -p bench --bin bench-tables`"
        );
        return ExitCode::FAILURE;
    }
    if let Err(e) = std::fs::write(&doc_path, rendered) {
        eprintln!("bench-tables: {}: {e}", doc_path.display());
        return ExitCode::FAILURE;
    }
    eprintln!("bench-tables: rewrote the generated sections of docs/benchmarks.md");
    ExitCode::SUCCESS
}
