#!/usr/bin/env python3
"""Summaries of the device runs' logs (run.sh, ab.sh, profile.sh call it; it runs here as well, on
the files a run brought back). Subcommands:

  tests PATH...        libtest logs (files, or folders searched for *.log): each binary's result
                       line that is not a clean pass, the failed tests and the first panics
  areas LOG            a CTS log's passed/failed/ignored cases per area (cuda::AREA::case)
  bench FILE...        bench outputs (text tables or --json files): per row, the median, min and max
                       over the files of the HAL median and of the ratio to the baseline
  ab DIR [REGEX]       ab.sh's logs (DIR/LABEL/N.txt): per row and build, median, min and max over
                       the processes of the HAL median (bench rows), of `row` lines (peers) and of
                       `wall time` lines; REGEX keeps the rows whose names match
  peers FILE...        `row NAME N MEDIAN P10 P90` lines (the peers example): median over the files
  trace TRACE.json     a `hal run --trace` file from a CUDA device: device slices per queue, dispatches
                       inside their executes, the completion spans' device time
  callchains           `perf script` output on stdin (profile.sh allreduce): the samples of the threads
                       that enqueue collectives, split into the HAL's path and raw NCCL's, inside and
                       outside ncclAllReduce
"""
import collections
import glob
import json
import os
import re
import statistics as st
import sys

# A bench table row: name, unit, HAL median (p10-p90), baseline median [key] or -, ratio or -.
BENCH_ROW = re.compile(
    r"^(?P<name>\S.*?)\s{2,}(?P<unit>\S+(?: \S+)*?)\s{2,}(?P<hal>[\d.]+) \([\d.]+-[\d.]+\)"
    r"\s+(?:(?P<base>[\d.]+) \[\d+\]|-)\s+(?:(?P<ratio>[\d.]+)x|-)")
PEERS_ROW = re.compile(r"^row (\S+) (\d+) ([\d.]+) ([\d.]+) ([\d.]+)")
WALL = re.compile(r"wall time: +([\d.]+)")
# The bench's scaling tables: a section line, then per thread count the HAL's thousands of
# submissions a second (p10-p90) and, further on, the speedup and (with a raw side) HAL/raw.
SCALING_SECTION = re.compile(r"^submission throughput, (each thread on its own queue|all threads on one queue)")
SCALING_ROW = re.compile(r"^\s+(\d+)\s+([\d.]+) \([\d.]+-[\d.]+\)\s+(.*)$")
# The parts of a row's name that are measurements of that run (the submit cost, the waiter's CPU):
# left out so that one row of several runs is one row.
MEASURED_IN_NAME = re.compile(r"\s*\(submit [\d.]+\)|,? ?waiter CPU \d+%|\s*\(\s*\)")


def row_key(name):
    """A row's name without the figures of the run it came from."""
    return re.sub(r"\s+", " ", MEASURED_IN_NAME.sub("", name)).strip()


def bench_rows(path):
    """{row name: (hal median, ratio or None)} of one bench output, text or JSON."""
    text = open(path, errors="replace").read()
    rows = {}
    if text.lstrip().startswith("{"):
        for w in json.loads(text).get("workloads", []):
            rows[row_key(w["name"])] = (w["median"], w.get("ratio"))
        return rows
    last = None
    for line in text.splitlines():
        m = BENCH_ROW.match(line)
        if m and not line.startswith("workload"):
            last = m.group("name").strip()
            rows[last] = (float(m.group("hal")), float(m.group("ratio")) if m.group("ratio") else None)
        elif last and line.startswith("  ") and line.strip():
            # A wrapped name's next line.
            full = f"{last} {line.strip()}"
            rows[full] = rows.pop(last)
            last = full
        else:
            last = None
    return {row_key(name): value for name, value in rows.items()}


def other_rows(path):
    """{name: value} from peers `row` lines (name N, median us) and `wall time` lines."""
    rows = {}
    walls = []
    section = None
    for line in open(path, errors="replace"):
        m = PEERS_ROW.match(line)
        if m:
            rows[f"peers {m.group(1)} N={m.group(2)}"] = float(m.group(3))
        h = SCALING_SECTION.match(line)
        if h:
            section = "own queues" if h.group(1).startswith("each") else "one queue"
        r = SCALING_ROW.match(line) if section else None
        if r:
            name = f"scaling, {section}, {r.group(1)} threads, ksub/s"
            rows[name] = float(r.group(2))
            ratios = re.findall(r"\b([\d.]+)x\b", r.group(3))
            if len(ratios) >= 2:  # the speedup, then HAL/raw
                rows[f"{name} (ratio)"] = float(ratios[1])
        w = WALL.search(line)
        if w:
            walls.append(float(w.group(1)))
    if walls:
        rows["wall time, s"] = st.median(walls)
    return rows


def spread(values):
    return f"{st.median(values):9.3f} ({min(values):.3f}-{max(values):.3f})"


def cmd_tests(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(f"{p}/**/*.log", recursive=True))
        else:
            files.append(p)
    clean = tested = 0
    for f in files:
        text = open(f, errors="replace").read()
        results = re.findall(r"^test result: .*$", text, re.M)
        name = os.path.relpath(f, paths[0]) if os.path.isdir(paths[0]) else f
        failed = re.findall(r"^test (\S+) \.\.\. FAILED", text, re.M)
        not_run = len(re.findall(r"not run:", text))
        bad = [r for r in results if not re.search(r"ok\. \d+ passed; 0 failed; 0 ignored", r)]
        if not results:
            if re.search(r"^test |panicked|exit [1-9]", text, re.M):
                print(f"{name}: no result line (ended early?)")
            continue
        tested += 1
        if bad or failed or not_run:
            print(f"{name}: {' | '.join(bad or results[-1:])}" + (f"; {not_run} not run" if not_run else ""))
            for t in failed[:10]:
                print(f"  FAILED {t}")
            for p in re.findall(r"panicked at .*\n.*", text)[:3]:
                print(f"  {p.strip()[:200]}")
        else:
            clean += 1
    print(f"{clean} of {tested} test-binary logs clean (every test passed, none ignored)")


def cmd_areas(log):
    counts = collections.defaultdict(collections.Counter)
    for m in re.finditer(r"^test ([a-z_]+)::([a-z_0-9]+)::\S+ \.\.\. (ok|FAILED|ignored)", open(log, errors="replace").read(), re.M):
        counts[f"{m.group(1)}::{m.group(2)}"][m.group(3)] += 1
    for area in sorted(counts):
        c = counts[area]
        print(f"{area:28} {c['ok']:4d} passed {c['FAILED']:4d} failed {c['ignored']:4d} ignored")


def cmd_bench(files):
    per = collections.defaultdict(lambda: ([], []))
    for f in files:
        for name, (hal, ratio) in bench_rows(f).items():
            per[name][0].append(hal)
            if ratio is not None:
                per[name][1].append(ratio)
    print(f"{len(files)} files; per row: HAL median over files (min-max), ratio to baseline (min-max)")
    for name, (hal, ratio) in per.items():
        print(f"{name[:70]:70} {spread(hal)}  {spread(ratio) if ratio else '-'}")


def process_notes(path):
    """(whether some rows ran below the run's highest SM clock, or None where the clock was not
    read; the `threads:` placement line, or None) of one bench output."""
    lowered = placement = None
    for line in open(path, errors="replace"):
        if line.startswith("GPU SM clock ("):
            lowered = "rows that ran below it" in line
        elif line.startswith("threads: "):
            placement = line.strip()
    return lowered, placement


def cmd_ab(folder, pattern=None):
    labels = sorted(d for d in os.listdir(folder) if os.path.isdir(f"{folder}/{d}"))
    order = os.path.join(folder, "ORDER")
    if os.path.exists(order):
        labels = open(order).read().split()
    data = {}
    for label in labels:
        for f in sorted(glob.glob(f"{folder}/{label}/*.txt")):
            rows = {k: v[0] for k, v in bench_rows(f).items()}
            rows.update({f"{k} (ratio)": v[1] for k, v in bench_rows(f).items() if v[1] is not None})
            rows.update(other_rows(f))
            for name, value in rows.items():
                data.setdefault(name, {}).setdefault(label, []).append(value)
    rx = re.compile(pattern) if pattern else None
    print(f"per row and build: median (min-max) over its processes; builds: {', '.join(labels)}")
    print(f"{'row':64} " + " ".join(f"{lb[:26]:>26}" for lb in labels))
    for name, by in data.items():
        if rx and not rx.search(name):
            continue
        if name.endswith("(ratio)") and not rx:
            continue
        cells = [spread(by[lb]) if lb in by else f"{'-':>26}" for lb in labels]
        print(f"{name[:64]:64} " + " ".join(f"{c:>26}" for c in cells))
    # Where the processes' threads ran and whether the GPU lowered its clock during some rows
    # (docs/benchmarks.md, "Where the threads run" and "The GPU's clock").
    for label in labels:
        notes = [process_notes(f) for f in sorted(glob.glob(f"{folder}/{label}/*.txt"))]
        read = [lowered for lowered, _ in notes if lowered is not None]
        placements = sorted({p for _, p in notes if p})
        if read or placements:
            clock = f"{sum(read)} of {len(read)} processes had rows below the highest SM clock" if read else "SM clock not read"
            print(f"{label}: {clock}; {'; '.join(placements) or 'threads: not reported'}")
    if len(labels) >= 2:
        first = labels[0]
        print(f"median ratio of each build to {first} (rows both have):")
        for lb in labels[1:]:
            # Times only: a scaling row is a rate (higher is better) and would pull the other way.
            r = [st.median(by[lb]) / st.median(by[first]) for name, by in data.items()
                 if first in by and lb in by and st.median(by[first]) > 0 and not name.endswith("(ratio)")
                 and not name.startswith("scaling, ") and (not rx or rx.search(name))]
            if r:
                print(f"  {lb}: {st.median(r):.3f}x over {len(r)} rows (min {min(r):.3f}x, max {max(r):.3f}x)")


def cmd_peers(files):
    rows = collections.defaultdict(list)
    for f in files:
        for name, value in other_rows(f).items():
            rows[name].append(value)
    for name, values in rows.items():
        print(f"{name:48} {spread(values)} us")


def cmd_trace(path):
    d = json.load(open(path))
    events = d["traceEvents"] if isinstance(d, dict) else d
    x = [e for e in events if e.get("ph") == "X" and e.get("pid") == 6]
    for q in sorted({e["tid"] // 2 for e in x}):
        ops = [e for e in x if e["tid"] == 2 * q]
        ds = [e for e in x if e["tid"] == 2 * q + 1]
        kinds = collections.Counter(e["name"] for e in ops)
        by_action = {e["args"]["action"]: e for e in ops if "action" in e.get("args", {})}
        inside = 0
        for dsp in ds:
            op = by_action.get(dsp.get("args", {}).get("action"))
            if op and dsp["ts"] + 2 >= op["ts"] and dsp["ts"] + dsp["dur"] <= op["ts"] + op["dur"] + 2:
                inside += 1
        durs = sorted(e["dur"] for e in ds)
        med = durs[len(durs) // 2] if durs else 0
        print(f"queue {q}: operations {dict(kinds)}, dispatches {len(ds)} ({inside} inside their execute), "
              f"median dispatch {med:.1f} us")
    c = [e for e in events if e.get("name") == "complete"]
    t = sorted(e["args"]["device_ns"] for e in c if "device_ns" in e.get("args", {}))
    print(f"complete spans {len(c)}, with device_ns {len(t)}, median {t[len(t) // 2] / 1e3 if t else '-'} us")


def callchain_samples(stream):
    chain = []
    for line in stream:
        line = line.rstrip("\n")
        if not line:
            if chain:
                yield chain
            chain = []
        elif line.startswith((" ", "\t")):
            parts = line.split(None, 1)
            chain.append(parts[1] if len(parts) > 1 else parts[0])
        else:
            chain = [line]
    if chain:
        yield chain


def cmd_callchains(stream):
    def new():
        return {"all": 0, "nccl": 0, "in": collections.Counter(), "out": collections.Counter(),
                "ours": collections.Counter()}
    paths = {p: new() for p in ("hal queue", "hal cb", "raw")}
    total, threads = 0, collections.Counter()
    for chain in callchain_samples(stream):
        total += 1
        threads[chain[0].split()[0]] += 1
        frames = chain[1:]
        text = "\n".join(frames)
        if "Queue::collective" in text:
            path = paths["hal queue"]
        elif "Queue::execute" in text:
            path = paths["hal cb"]
        elif "raw::Rank" in text or ("ncclAllReduce" in text and "hal::" not in text):
            path = paths["raw"]
        else:
            continue
        path["all"] += 1
        leaf = (frames[0].split(" (")[0] if frames else "?").split("+0x")[0]
        if any("ncclAllReduce" in f or "ncclGroupEnd" in f for f in frames):
            path["nccl"] += 1
            path["in"][leaf] += 1
        else:
            path["out"][leaf] += 1
            for name in {f.split("+0x")[0].split(" (")[0] for f in frames if "hal::" in f or "driver_cuda::" in f}:
                path["ours"][name] += 1
    print(f"samples {total}; by thread: {dict(threads.most_common(6))}")
    for name, p in paths.items():
        print(f"{name}: {p['all']} samples on the enqueuing path, {p['nccl']} inside ncclAllReduce "
              f"({100 * p['nccl'] / max(p['all'], 1):.1f}%)")
        for where in ("in", "out"):
            print(f"  {where} NCCL, top leaves: " + ", ".join(f"{s[:70]} {n}" for s, n in p[where].most_common(12)))
        for fn, n in p["ours"].most_common(30):
            print(f"    outside NCCL, inclusive: {n:5d} {fn[:150]}")


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    cmd, args = argv[1], argv[2:]
    if cmd == "tests" and args:
        cmd_tests(args)
    elif cmd == "areas" and len(args) == 1:
        cmd_areas(args[0])
    elif cmd == "bench" and args:
        cmd_bench(args)
    elif cmd == "ab" and 1 <= len(args) <= 2:
        cmd_ab(*args)
    elif cmd == "peers" and args:
        cmd_peers(args)
    elif cmd == "trace" and len(args) == 1:
        cmd_trace(args[0])
    elif cmd == "callchains" and not args:
        cmd_callchains(sys.stdin)
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
