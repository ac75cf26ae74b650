import sys, statistics
sys.argv = sys.argv[:3]
exec(open(__import__("os").path.dirname(__file__) + "/first_pass_parts.py").read().split("sets = ")[0])
def tag(key):
    k = key[1]
    if k is None: return "none"
    if isinstance(k, tuple) and k and isinstance(k[0], str): return k[0]
    if isinstance(k, tuple): return "plan"
    return str(k)
def caches():
    for pc in (vc._CACHES, st._STEP_CACHES):
        for _, c in pc._caches.values(): yield "vc" if pc is vc._CACHES else "st", c
    for name, c in (("mem", mem._MEMO), ("lk", mem._LAYER_KINDS), ("mf", st._MODEL_FLOPS), ("cols", oc._COLUMNS), ("part", pa._STAGE_SPLITS)):
        yield name, c
binding = {("vc", "costs"), ("st", "update"), ("st", "loss"), ("mem", "train"), ("mem", "largest"), ("mem", "state"), ("mf", "*")}
def clear(pred):
    for name, c in caches():
        for k in list(c._entries):
            if pred(name, tag(k)): del c._entries[k]
run(); 
print(sorted({(n, tag(k)) for n, c in caches() for k in c._entries}))
groups = {
  "binding": lambda n, t: (n, t) in binding or n == "mf",
  "binding+plans+work": lambda n, t: (n, t) in binding or n == "mf" or t in ("plan", "work"),
  "binding+cols": lambda n, t: (n, t) in binding or n == "mf" or n == "cols",
  "binding+params+acc": lambda n, t: (n, t) in binding or n == "mf" or t in ("params", "accumulate"),
  "binding+part+passes": lambda n, t: (n, t) in binding or n == "mf" or n == "part" or t == "passes",
  "everything": lambda n, t: True,
}
res = {g: [] for g in groups}
for rep in range(21):
    for g, pred in groups.items():
        run(); clear(pred); res[g].append(run())
n = len(points)
for g, v in res.items(): print(f"{g:22} {1e6*statistics.median(v)/n:6.1f} us/config")
