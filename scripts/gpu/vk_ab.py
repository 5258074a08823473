# Prints bench --driver vulkan rows before/after (files bench-vulkan-{before,after}-N.txt in argv[1]) beside raw Vulkan.
import re, sys, glob, statistics
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f"{out}/bench-vulkan-*-*.txt")):
    v = "before" if "-before-" in f else "after"
    text = open(f).read().replace("\n  ", " ")
    for line in text.splitlines():
        m = re.match(r"(.{20,}?)\s{2,}(us/\S+(?: \S+)?)\s+([\d.]+) \(.*?\)\s+([\d.]+)", line)
        if m:
            name = re.sub(r"\s*\(submit [\d.]+\)", "", m.group(1)).strip()
            rows.setdefault(name, {"before": [], "after": [], "raw": []})
            rows[name][v].append(float(m.group(3))); rows[name]["raw"].append(float(m.group(4)))
print(f"{'row':62} {'before':>9} {'after':>9} {'raw':>9} {'after/raw':>9}")
for name, r in rows.items():
    if r["before"] and r["after"]:
        b, a, w = (statistics.median(r[k]) for k in ("before", "after", "raw"))
        print(f"{name[:62]:62} {b:9.2f} {a:9.2f} {w:9.2f} {a / w:8.2f}x")
