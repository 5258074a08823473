"""Checks a `hal run --trace` file from a CUDA device: device timestamp slices (pid 6) per queue,
dispatches inside their executes. Usage: python3 trace_check.py TRACE.json"""
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
x = [e for e in events if e.get("ph") == "X" and e.get("pid") == 6]
for q in (0, 1):
    ops = [e for e in x if e["tid"] == 2 * q]
    ds = [e for e in x if e["tid"] == 2 * q + 1]
    kinds = {}
    for e in ops:
        kinds[e["name"]] = kinds.get(e["name"], 0) + 1
    by_action = {e["args"]["action"]: e for e in ops}
    inside = sum(1 for d in ds if d["args"]["action"] in by_action
                 and d["ts"] + 2 >= by_action[d["args"]["action"]]["ts"]
                 and d["ts"] + d["dur"] <= by_action[d["args"]["action"]]["ts"] + by_action[d["args"]["action"]]["dur"] + 2)
    durs = sorted(d["dur"] for d in ds)
    med = durs[len(durs) // 2] if durs else 0
    print(f"queue {q}: operations {kinds}, dispatches {len(ds)} ({inside} inside their execute), "
          f"median dispatch {med:.1f} us, names {sorted(set(d['name'] for d in ds))}")
