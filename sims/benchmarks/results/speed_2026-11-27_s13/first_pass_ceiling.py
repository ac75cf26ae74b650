import sys, statistics
sys.argv = sys.argv[:3]
exec(open(__import__("os").path.dirname(__file__) + "/first_pass_parts.py").read().split("sets = ")[0])
def clear_binding():
    for pc in (vc._CACHES, st._STEP_CACHES):
        for _, c in pc._caches.values():
            for k in list(c._entries):
                if k[1][0] in ("costs", "update", "loss") : del c._entries[k]
    for k in list(mem._MEMO._entries):
        if k[1][0] in ("train", "largest", "state"): del mem._MEMO._entries[k]
    st._MODEL_FLOPS._entries.clear()
a, b = [], []
for rep in range(25):
    clear_caches(); graph_and_counts(hf, mode); a.append(run())
    clear_binding(); b.append(run())
n = len(points)
print(f"all {1e6*statistics.median(a)/n:.1f}  per-binding only {1e6*statistics.median(b)/n:.1f} us/config")
