"""Idle time between a device's kernels in a decode_probe perfetto trace, by the kernel that ends each gap."""
import collections, glob, gzip, json, re, sys

path = glob.glob(f"{sys.argv[1]}/**/perfetto_trace.json.gz", recursive=True)[0]
trace = json.load(gzip.open(path))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
def kind(name):
    if name.startswith("all_reduce") or "AllReduce" in name: return "all_reduce"
    if "AllGather" in name or name.startswith("all_gather"): return "all_gather"
    if "Memcpy" in name or "Memset" in name: return "memcpy"
    if "gemm" in name or "nvjet" in name or "dot" in name: return "gemm"
    if "attention" in name: return "attention"
    return "other"
out = {}
for pid, pname in names.items():
    if "GPU" not in pname: continue
    ks = sorted((e["ts"], e["ts"] + e.get("dur", 0.0), e["name"]) for e in events if e.get("ph") == "X" and e["pid"] == pid)
    if not ks: continue
    gaps, busy_end, by = 0.0, ks[0][1], collections.defaultdict(lambda: [0, 0.0])
    hist = collections.Counter()
    for start, end, name in ks[1:]:
        if start > busy_end:
            g = start - busy_end; gaps += g; by[kind(name)][0] += 1; by[kind(name)][1] += g
            hist[min(int(g), 50)] += 1
        busy_end = max(busy_end, end)
    span = ks[-1][1] - ks[0][0]
    out[pname] = {"span_us": span, "idle_us": gaps, "kernels": len(ks),
                  "idle_before_kind_us": {k: [v[0], round(v[1], 1)] for k, v in by.items()},
                  "gap_histogram_us": dict(sorted(hist.items()))}
print(json.dumps(out, indent=1))
