import pickle, sys, math
a, b = pickle.load(open(sys.argv[1], "rb")), pickle.load(open(sys.argv[2], "rb"))
assert [x[0] for x in a] == [x[0] for x in b]
worst, exact, n = 0.0, 0, 0
def cmp(x, y):
    global worst
    if isinstance(x, dict):
        assert x.keys() == y.keys(); [cmp(x[k], y[k]) for k in x]
    elif isinstance(x, list):
        assert len(x) == len(y), (len(x), len(y)); [cmp(p, q) for p, q in zip(x, y)]
    elif isinstance(x, float) and isinstance(y, float):
        if x != y: worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
    else:
        assert x == y, (x, y)
for (k, s1, r1), (_, s2, r2) in zip(a, b):
    cmp(s1, s2); cmp(r1, r2); n += 1; exact += (s1 == s2 and r1 == r2)
print(f"{n} configurations, {exact} bit-identical, worst relative difference {worst:.3g}")
