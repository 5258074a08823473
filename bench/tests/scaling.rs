//! The scaling tables on cpu-sim: every row present with a positive throughput, a thread count
//! beyond the device's queues reported in its row, and the `--scaling` run printing and writing both
//! tables (on a device widened to a queue per thread).

use bench::scaling::{self, Cell, Placement, ScalingSizes};
use bench::session::{self, Options};
use bench::workloads::Env;
use driver_cpu_sim::{CpuSimDriver, CpuSimOptions};
use hal::driver::Driver;

fn cpu_sim(queues: usize) -> hal::Device {
    let options = CpuSimOptions::default().with_queue_count(queues).with_workgroup_threads(1);
    CpuSimDriver::with_options(options).create_device(0).expect("cpu-sim device")
}

fn tiny(max_threads: usize) -> ScalingSizes {
    ScalingSizes { warmup: 0, trials: 2, ops_per_thread: 20, max_threads }
}

fn positive(cell: &Cell) -> bool {
    cell.rate().is_some_and(|rate| rate.is_finite() && rate > 0.0)
}

#[test]
fn both_tables_have_a_measured_row_per_thread_count() {
    let env = Env::new(cpu_sim(2)).unwrap();
    let tables = scaling::run(&env, tiny(2), &mut |_| {}).unwrap();
    assert_eq!(tables.iter().map(|t| t.placement).collect::<Vec<_>>(), Placement::ALL);
    for table in &tables {
        assert_eq!(table.rows.iter().map(|r| r.threads).collect::<Vec<_>>(), [1, 2], "{table:?}");
        for row in &table.rows {
            assert!(positive(&row.hal), "{table:?}");
            assert!(row.raw.is_none(), "cpu-sim has no raw baseline: {table:?}");
        }
        assert!(table.hal_efficiency(&table.rows[1]).is_some_and(|e| e > 0.0), "{table:?}");
        let text = bench::report::scaling_table(table);
        assert!(text.contains(table.placement.name()) && text.contains("no raw baseline"), "{text}");
    }
}

#[test]
fn more_threads_than_queues_is_reported_in_the_own_queue_row() {
    let env = Env::new(cpu_sim(1)).unwrap();
    let tables = scaling::run(&env, tiny(2), &mut |_| {}).unwrap();
    let own = &tables[0];
    assert_eq!(own.placement, Placement::OwnQueue);
    assert!(positive(&own.rows[0].hal), "{own:?}");
    match &own.rows[1].hal {
        Cell::Skipped(why) => assert!(why.contains("2 queues") && why.contains("has 1"), "{why}"),
        Cell::Measured(_) => panic!("2 threads ran on a 1-queue device's own queues: {own:?}"),
    }
    let text = bench::report::scaling_table(own);
    let row = text.lines().find(|l| l.trim_start().starts_with("2 ")).expect("a row for 2 threads");
    assert!(row.contains("the device has 1"), "{text}");
    // The shared queue is one queue for any thread count.
    assert!(tables[1].rows.iter().all(|r| positive(&r.hal)), "{:?}", tables[1]);
}

#[test]
fn the_scaling_option_runs_only_the_tables_on_a_queue_per_thread() {
    let json = std::env::temp_dir().join(format!("bench-scaling-{}.json", std::process::id()));
    let options =
        Options { scaling: true, quick: true, max_threads: 2, json: Some(json.clone()), ..Options::default() };
    let mut out = Vec::new();
    // One queue: the run reopens cpu-sim with a queue per thread rather than skip the 2-thread row.
    session::run(cpu_sim(1), None, &options, &mut out, &mut |_| {}).unwrap();
    let text = String::from_utf8(out).unwrap();
    let written = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_file(&json);
    assert!(text.contains("with 2 queues"), "{text}");
    assert!(!text.contains("not run"), "{text}");
    for placement in Placement::ALL {
        assert!(text.contains(placement.name()), "{text}");
    }
    assert!(!text.contains("long run") && !text.contains("chained submissions in"), "only the tables: {text}");
    assert_eq!(written.matches("\"hal_submissions_per_s\"").count(), 4, "{written}");
    assert!(written.contains("\"workloads\": [\n  ],"), "{written}");
}
