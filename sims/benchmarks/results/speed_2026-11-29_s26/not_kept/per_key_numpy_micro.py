# Hot (timeit) cost of a Qwen3-30B-A3B training sweep's 42 update-row keys and 13 accumulation keys (pp 2): computed as
# numpy arrays over the keys (not_kept/train_keys_numpy.py.txt, the tree of vectorised_per_key.patch) against key by
# key (step._training_update_rows, train_rows._accumulate_rows). Run with PYTHONPATH=that tree.
import timeit
from sims.benchmarks import speed_compare as sc
from sims.cache import clear_caches
import sims.train_keys as tk, sims.step as step, sims.train_rows as tr
from sims.api import _Call, _prepare, cost_together, sum_stages_together
from sims.hardware import hardware_spec
from sims.stacks import DEFAULT_STACK
_, _, hf, hardware, points = next(sc._sweeps(("qwen3_30b_a3b", "train")))
sc._fresh(hf, "train"); sc._simulate_many(hf, hardware, points)
call = _Call(hf, hardware_spec(hardware), DEFAULT_STACK)
prep = [_prepare(call, l, w) for l, w in points]
graph, ctxs = prep[0][1], [c for _, _, c in prep]
cost_together(graph, ctxs); sum_stages_together(graph, ctxs)
slow = [c.costs.derived[step._stages_key(c)].slowest for c in ctxs]
firsts = {step.update_key(c, s): (c, s) for c, s in zip(ctxs, slow)}
ms, mss = [c for c, _ in firsts.values()], [s for _, s in firsts.values()]
acc = [c for c in {tr._accumulate_key(c): c for c in ctxs}.values() if c.layout.pp == 2]
n = 300
print(len(ctxs), "configurations,", len(ms), "update keys,", len(acc), "accumulation keys (pp 2)")
print(f"update rows: numpy over the keys {timeit.timeit(lambda: tk._update_rows(graph, ms, mss), number=n)/n*1e6:.0f} us, "
      f"key by key {timeit.timeit(lambda: [step._training_update_rows(graph, c, s) for c, s in zip(ms, mss)], number=n)/n*1e6:.0f} us")
def together():
    tr._CACHES.of(ctxs[0].hw).clear(); tr.accumulate_together(graph, acc)
print(f"accumulation rows: numpy (with its cache stores) {timeit.timeit(together, number=n)/n*1e6:.0f} us, "
      f"key by key {timeit.timeit(lambda: [tr._accumulate_rows(graph, c) for c in acc], number=n)/n*1e6:.0f} us")
