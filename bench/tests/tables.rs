//! `docs/benchmarks.md`'s generated tables are what `bench/results/*.json` render, and every result
//! file names its commit and machine. On a failure, `cargo run -p bench --bin bench-tables`
//! rewrites the tables from the files.

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_result_file_names_its_commit_and_machine() {
    let results = root().join("bench/results");
    for name in bench::tables::result_names(&results).unwrap() {
        let path = results.join(format!("{name}.json"));
        let file: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(e) = bench::tables::validate(&file) {
            panic!("{}: {e}", path.display());
        }
    }
}

#[test]
fn the_doc_tables_are_what_the_result_files_render() {
    let doc = std::fs::read_to_string(root().join("docs/benchmarks.md")).unwrap();
    let rendered = bench::tables::render_doc(&doc, &root().join("bench/results")).unwrap_or_else(|e| panic!("{e}"));
    if rendered != doc {
        let line = doc.lines().zip(rendered.lines()).position(|(a, b)| a != b).unwrap_or(0) + 1;
        panic!(
            "docs/benchmarks.md differs from what bench/results/*.json render (from line {line}): \
             run `cargo run -p bench --bin bench-tables`"
        );
    }
}
