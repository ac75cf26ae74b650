# Hot (timeit) cost of a Qwen3-30B-A3B training sweep's 42 update-row keys: train_keys._update_rows (one Python pass,
# the lookups shared: not_kept/train_keys_batched.py.txt, the tree of batched_update_rows.patch) against key by key
# (step._training_update_rows), and whether they are equal. Run with PYTHONPATH=that tree.
import timeit
from sims.benchmarks import speed_compare as sc
import sims.train_keys as tk, sims.step as step
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
graphs = [graph] * len(ms)
print("equal:", tk._update_rows(graphs, ms, mss) == [step._training_update_rows(graph, c, s) for c, s in zip(ms, mss)])
n = 1000
print(f"{len(ms)} update keys: one pass {timeit.timeit(lambda: tk._update_rows(graphs, ms, mss), number=n)/n*1e6:.0f} us, "
      f"key by key {timeit.timeit(lambda: [step._training_update_rows(graph, c, s) for c, s in zip(ms, mss)], number=n)/n*1e6:.0f} us")
