"""A decode step's attention over a shared prefix (a "cascade"), costed as the kernels that run it.

With workload.shared_prefix = n > 1 the first seq_len cached tokens of each row (its prompt) are held once per
group of n rows (framework/backends/maxtext/models/prefix_cache.py). Each layer's attention is then two calls of
the same decode-attention kernel and a merge:
  prefix: batch = prompts (rows / n), n x heads query heads, KV length = the prompt (seq_len)
  suffix: batch = rows, KV length = the row's own tokens decoded so far (context_len - seq_len)
  merge:  the two partial outputs combined by their log-sum-exp, an elementwise pass over
          [rows, heads, v_dim] in float32 (reads both, writes one)
Each call is costed by calculator.op_cost at its own batch x KV length, so an efficiency table's decode surface
(or the built-in attention factors) times both; the merge takes the elementwise class's factors. The cache holds
prompts x seq_len + rows x (context_len - seq_len) entries (sims/memory.py).
"""

from __future__ import annotations

from dataclasses import replace

from sims.calculator import Context, OpCost, op_cost
from sims.ir import OpNode

MERGE_OP = "attention_merge"  # the efficiency table's name for the merge (its elementwise class when unnamed)
MERGE_BYTES = 4  # float32 partial outputs
MERGE_FLOPS_PER_ELEMENT = 4  # two scales, a sum and a divide per output element


def shares_prefix(ctx: Context) -> bool:
    return ctx.workload.mode == "decode" and ctx.workload.shared_prefix > 1


def attention_cost(node: OpNode, ctx: Context) -> OpCost | None:
    """op_cost of `node`, with an attention node of a shared-prefix decode costed as its two calls and merge."""
    if node.op_type != "attention" or not shares_prefix(ctx):
        return op_cost(node, ctx)
    return cascade_cost(node, ctx)


def cascade_cost(node: OpNode, ctx: Context) -> OpCost:
    """One forward execution of a shared-prefix decode attention on one device (a row's figures per replica)."""
    n, prompt, dims = ctx.workload.shared_prefix, ctx.dims["prefix_len"], ctx.dims
    grouped = replace(node, attrs={**node.attrs, "heads": node.attrs["heads"] * n})
    prefix = op_cost(grouped, _plain(ctx, batch=dims["batch"] / n, kv_len=prompt))
    suffix = op_cost(node, _plain(ctx, batch=dims["batch"], kv_len=dims["kv_len"] - prompt))
    merge = merge_cost(node, ctx)
    parts = (prefix, suffix, merge)
    time_s = sum(part.time_s for part in parts)
    bound = max(parts, key=lambda part: part.time_s).bound
    return OpCost(sum(p.flops for p in parts), sum(p.bytes for p in parts), time_s, bound)


def merge_cost(node: OpNode, ctx: Context) -> OpCost:
    """The log-sum-exp merge of the two calls' outputs: roofline with the elementwise class's factors and floor."""
    elements = ctx.dims["batch"] * node.attrs["heads"] / ctx.tp * node.attrs["v_dim"]
    sums = 2 * 2 * ctx.dims["batch"] * node.attrs["heads"] / ctx.tp  # each call's (l, m) per head
    flops, nbytes = MERGE_FLOPS_PER_ELEMENT * elements, (3 * elements + sums) * MERGE_BYTES
    factors = ctx.hw.efficiency.for_op(MERGE_OP, "elementwise")
    compute_s = flops / (ctx.precision.other_peak * factors.compute)
    memory_s = nbytes / (ctx.hw.memory_bytes_per_s * factors.memory)
    floor_s = factors.floor_us * 1e-6
    bound = "floor" if floor_s >= max(compute_s, memory_s) else "compute" if compute_s >= memory_s else "memory"
    return OpCost(flops, nbytes, max(compute_s, memory_s) + floor_s, bound)


def _plain(ctx: Context, batch: float, kv_len: float) -> Context:
    """ctx for one kernel call: a decode of `batch` rows (one query each) over `kv_len` cached tokens."""
    workload = replace(ctx.workload, shared_prefix=1, context_len=int(kv_len))
    dims = {**ctx.dims, "batch": batch, "kv_len": kv_len, "tokens": batch, "shared_prefix": 1, "prefix_len": 0}
    return replace(ctx, dims=dims, workload=workload, costs=None)


def cached_tokens(sequences: float, ctx: Context) -> float:
    """K/V entries per layer and KV head that `sequences` rows of the replica hold: the prompt once per group."""
    kv_len = ctx.dims["kv_len"]
    if not shares_prefix(ctx):
        return sequences * kv_len
    prompt = ctx.dims["prefix_len"]
    return sequences / ctx.workload.shared_prefix * prompt + sequences * (kv_len - prompt)
