# us per Plan construction (dataclass + __post_init__) for a Qwen3-30B-A3B plan, and per _build_plan with every
# shared array kept (one sweep's first pass built them), in the tree on PYTHONPATH.
import dataclasses, timeit
from sims.benchmarks import speed_compare as sc
import sims.vector_cost as vc
from sims.api import _Call, _prepare
from sims.hardware import hardware_spec
from sims.stacks import DEFAULT_STACK
_, _, hf, hardware, points = next(sc._sweeps(("qwen3_30b_a3b", "prefill")))
sc._fresh(hf, "prefill"); sc._simulate_many(hf, hardware, points)
call = _Call(hf, hardware_spec(hardware), DEFAULT_STACK)
ctx = [c for _, _, c in (_prepare(call, l, w) for l, w in points) if c is not None and c.tp == 2 and c.ep == 4][0]
plan = vc.plan_for(ctx.costs and None or _prepare(call, {"tp": 2, "ep": 4}, points[0][1])[1], ctx)
fields = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
graph = _prepare(call, {"tp": 2, "ep": 4}, points[0][1])[1]
n = 20000
print(f"Plan(...)   {min(timeit.repeat(lambda: vc.Plan(**fields), number=n, repeat=5)) / n * 1e6:6.2f} us")
print(f"_build_plan {min(timeit.repeat(lambda: vc._build_plan(graph, ctx), number=n // 4, repeat=5)) / (n // 4) * 1e6:6.2f} us")
