"""Layout (how devices are split) and workload (what they run), parsed from plain dicts.

Layout convention (Megatron/vLLM): ranks are ordered tp (innermost), dp, pp (outermost), so one
pipeline stage holds tp*dp devices and world = tp*dp*pp. Expert parallelism does not add devices:
the ep group is carved out of the tp*dp devices of a stage (ep must divide tp*dp). With ep > 1
every device holds num_experts/ep whole experts (expert tensor parallel = 1, as vLLM/SGLang with
expert parallelism); with ep = 1 experts are tensor-parallel over tp like a dense MLP.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from framework.core.errors import ConfigError
from sims.builders.registry import MODES
from sims.calibration.table import DTYPES
from sims.checks import no_unknown
from sims.hardware import HardwareSpec
from sims.ir import OP_TYPES

LAYOUT_KEYS = ("tp", "dp", "ep", "pp")
WORKLOAD_DEFAULTS = {
    "mode": None,
    "batch": 1,
    "seq_len": None,
    "context_len": None,
    "microbatches": 1,
    "recompute": False,
    "recompute_keeps": (),
    "logits_chunk": None,
    "loss_len": None,
    "dtype": "bf16",
    "zero": False,
    "shard_weights": False,
    "shared_prefix": 1,
    "scanned": False,
    "param_dtype": None,
}


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1

    @property
    def devices(self) -> int:
        return self.tp * self.dp * self.pp


@dataclass(frozen=True)
class Workload:
    """batch: sequences per step over all dp replicas. seq_len: prompt (prefill) or sequence
    (train) length. context_len: tokens already in the KV cache (decode; seq_len is ignored).
    microbatches: the batch of each dp replica runs as this many pipeline micro-batches.
    recompute: activation recomputation per layer (train): a layer keeps its input and recomputes the
    rest in the backward pass. recompute_keeps: op types (sims.ir.OP_TYPES) whose outputs a recomputed
    layer keeps instead of recomputing them; () = full recompute, ("gemm",) = keep the weight GEMMs'
    outputs (JAX's dots_with_no_batch_dims_saveable). logits_chunk: the loss projects this many
    positions of each sequence onto the vocabulary at a time (a chunked loss; None = every position at
    once). loss_len: the last positions of each sequence the loss takes logits of (train; GRPO: the
    completion; None = every position); in prefill, the positions a log-prob pass projects onto the vocabulary and
    takes log-probs of (None: the last position's logits only, as generation needs). zero: optimizer states
    sharded over dp (Megatron distributed optimizer / ZeRO-1).
    shard_weights: the weights too are sharded over dp (fsdp, ZeRO-3): gathered and their gradients
    reduce-scattered every micro-batch (sims/scan_update.py; train needs zero); in prefill and decode (an
    FSDP rollout) gathered every forward pass, every decode step (sims/sharded_forward.py).
    shared_prefix: decode rows per prompt whose first seq_len cached tokens (the prompt) are held once per group of
    that many rows and attended in a kernel call of their own (sims/shared_prefix.py); 1 = every row its own copy.
    scanned: a prefill-mode pass without a KV cache that scans its layers over stacked weights, slicing each layer's
    weights out every pass (sims/scan_forward.py; the stack's scanned_forward).
    param_dtype: the dtype a scanned pass's weights (needs `scanned`) are stored in when the pass casts them to dtype
    as it uses them (the maxtext backend's log-prob passes over float32 master weights): its scan's slices read them
    at these bytes and its log-prob head casts them every chunk (sims/scan_forward.py); None = stored in dtype. The
    memory model does not read it."""

    mode: str
    batch: int
    seq_len: int | None
    context_len: int | None
    microbatches: int
    recompute: bool
    recompute_keeps: tuple[str, ...]
    logits_chunk: int | None
    loss_len: int | None
    dtype: str
    zero: bool
    shard_weights: bool
    shared_prefix: int
    scanned: bool
    param_dtype: str | None

    @property
    def query_len(self) -> int:
        return 1 if self.mode == "decode" else self.seq_len

    @property
    def kv_len(self) -> int:
        return self.context_len if self.mode == "decode" else self.seq_len


def layout_from_parallel(parallel: Mapping, devices: int) -> tuple[dict, bool]:
    """The simulator's {tp, dp, ep, pp} for a run's `parallel` node (framework/core/parallel.py), and
    whether optimizer states are sharded (zero: fsdp > 1).

    dp x fsdp ranks are data-parallel replicas here; ep is carved from tp x dp (see the module doc),
    so it is checked by `layout_problem`, not by ParallelConfig. A -1 axis takes the remaining of
    `devices`; without one the layout may use fewer devices than the hardware has. Context
    parallelism is not modelled: cp > 1 is a ConfigError.
    """
    from dataclasses import replace

    from framework.core.parallel import REMAINING, ParallelConfig

    config = ParallelConfig(**{axis: int(size) for axis, size in parallel.items()})
    if config.cp != 1:
        raise ConfigError(f"parallel.cp: {config.cp}; the simulator does not model context parallelism (use cp=1)")
    if config.ep < 1:
        raise ConfigError(f"parallel.ep: {config.ep} is not valid; give the expert-parallel size (>= 1)")
    sizes = replace(config, ep=1)
    if REMAINING in (sizes.dp, sizes.fsdp, sizes.tp, sizes.pp):
        sizes = sizes.resolve(devices)
    else:
        sizes.resolve(sizes.devices)  # positive sizes
    layout = {"tp": sizes.tp, "dp": sizes.dp * sizes.fsdp, "ep": config.ep, "pp": sizes.pp}
    return layout, sizes.fsdp > 1


def _parsed(kind: str, record: Mapping, parse):
    """parse(record), remembered by the record's items and their types (a sweep passes the same
    few layouts and workloads again and again); records with unhashable values are parsed anew."""
    key = (kind, tuple(record.items()), tuple(map(type, record.values())))
    try:
        parsed = _PARSED.get(key)
    except TypeError:  # unhashable: the lookup hashes the key
        return parse(record)
    if parsed is None:
        parsed = parse(record)
        if len(_PARSED) >= 4096:
            _PARSED.clear()
        _PARSED[key] = parsed
    return parsed


_PARSED: dict[tuple, "Layout | Workload"] = {}


def parse_layout(layout: Mapping) -> Layout:
    return _parsed("layout", layout, _parse_layout)


def parse_workload(workload: Mapping, node: str = "workload") -> Workload:
    """`workload` checked and parsed; its one-line errors name a key as `node`.key (the sim task's `sim`: the keys
    the user typed). The errors only differ by node, so parses are remembered whatever the node."""
    return _parsed("workload", workload, lambda record: _parse_workload(record, node))


def _parse_layout(layout: Mapping) -> Layout:
    no_unknown("layout", layout, LAYOUT_KEYS)
    values = {}
    for key in LAYOUT_KEYS:
        values[key] = _positive_int(f"layout.{key}", layout.get(key, 1))
    return Layout(**values)


def _parse_workload(workload: Mapping, node: str) -> Workload:
    no_unknown(node, workload, WORKLOAD_DEFAULTS)
    w = {**WORKLOAD_DEFAULTS, **{k: v for k, v in workload.items() if v is not None}}
    if w["mode"] not in MODES:
        raise ConfigError(f"{node}.mode is {w['mode']!r}; valid: {', '.join(MODES)}")
    if w["dtype"] not in DTYPES:
        raise ConfigError(f"{node}.dtype is {w['dtype']!r}; valid: {', '.join(DTYPES)}")
    if w["param_dtype"] is not None and w["param_dtype"] not in DTYPES:
        raise ConfigError(f"{node}.param_dtype is {w['param_dtype']!r}; valid: {', '.join(DTYPES)} (or null: the "
                          f"weights stored in {node}.dtype)")
    needed = "context_len" if w["mode"] == "decode" else "seq_len"
    if w[needed] is None:
        raise ConfigError(f"{node}.{needed} is required for mode {w['mode']}")
    for key in ("batch", "microbatches", "seq_len", "context_len", "logits_chunk", "loss_len", "shared_prefix"):
        if w[key] is not None:
            w[key] = _positive_int(f"{node}.{key}", w[key])
    for key in ("recompute", "zero", "shard_weights", "scanned"):
        if not isinstance(w[key], bool):
            raise ConfigError(f"{node}.{key} is {w[key]!r}; expected true or false")
    w["recompute_keeps"] = _recompute_keeps(w["recompute_keeps"], w["recompute"], node)
    _check_shared_prefix(w, node)
    if w["loss_len"] is not None and w["mode"] == "decode":
        raise ConfigError(f"{node}.loss_len is for mode train (the loss's positions) or prefill (a log-prob pass's), "
                          f"not decode")
    if w["scanned"] and w["mode"] != "prefill":
        raise ConfigError(f"{node}.scanned is for mode prefill (a forward pass over stacked layers), not {w['mode']}; "
                          f"a training step's scan is the stack's scanned_update")
    if w["param_dtype"] is not None and w["mode"] != "prefill":
        raise ConfigError(f"{node}.param_dtype is for mode prefill (a pass that casts stored weights as it uses them), "
                          f"not {w['mode']}; leave it null")
    if w["param_dtype"] is not None and not w["scanned"]:  # an unrolled pass's casts are not modelled
        raise ConfigError(f"{node}.param_dtype needs {node}.scanned: true (the casts modelled are a scanned pass's, "
                          f"sims/scan_forward.py); leave it null")
    if w["shard_weights"] and not w["zero"] and w["mode"] == "train":
        raise ConfigError(f"{node}.shard_weights needs zero: true (sharded weights shard their optimizer states too)")
    return Workload(**w)


def _check_shared_prefix(w: dict, node: str) -> None:
    """A shared prefix is a decode's: its prompt (seq_len) is the first part of the cached context_len tokens."""
    if w["shared_prefix"] == 1:
        return
    valid = (f"valid: 1 (no shared prefix), or > 1 with {node}.mode decode and {node}.seq_len (the shared prompt) "
             f"below {node}.context_len (the rows' own tokens follow it)")
    if w["mode"] != "decode":
        raise ConfigError(f"{node}.shared_prefix is {w['shared_prefix']} with {node}.mode {w['mode']}; {valid}")
    if w["seq_len"] is None or w["seq_len"] >= w["context_len"]:
        raise ConfigError(f"{node}.shared_prefix is {w['shared_prefix']} with {node}.seq_len {w['seq_len']} and "
                          f"{node}.context_len {w['context_len']}; {valid}")


def _recompute_keeps(keeps, recompute: bool, node: str) -> tuple[str, ...]:
    if not isinstance(keeps, (list, tuple)) or not all(kind in OP_TYPES for kind in keeps):
        raise ConfigError(f"{node}.recompute_keeps is {keeps!r}; expected a list of op types ({', '.join(OP_TYPES)})")
    if keeps and not recompute:
        raise ConfigError(f"{node}.recompute_keeps needs recompute: true (without recompute every activation is kept)")
    return tuple(sorted(set(keeps)))


def layout_problem(meta: Mapping, hw: HardwareSpec, layout: Layout, workload: Workload) -> str | None:
    """Why this layout cannot run this model and workload, or None when it can."""
    tp, dp, ep, pp = layout.tp, layout.dp, layout.ep, layout.pp
    if layout.devices > hw.devices:
        available = f"{hw.devices} available ({hw.devices_per_node} per node x {hw.nodes} nodes)"
        return f"tp*dp*pp = {layout.devices} devices > {available}"
    heads, kv_heads = meta["num_attention_heads"], meta["num_key_value_heads"]
    if heads % tp:
        return f"tp={tp} does not divide num_attention_heads={heads}"
    if (tp % kv_heads) if tp >= kv_heads else (kv_heads % tp):
        return (
            f"tp={tp} and num_key_value_heads={kv_heads}: one must divide the other (kv heads are split or replicated)"
        )
    if meta["intermediate_size"] and meta["intermediate_size"] % tp:
        return f"tp={tp} does not divide intermediate_size={meta['intermediate_size']}"
    experts = meta["num_experts"]
    if ep > 1 and not experts:
        return f"ep={ep} but the model is dense (no experts)"
    if experts and experts % ep:
        return f"ep={ep} does not divide num_experts={experts}"
    if (tp * dp) % ep:
        return f"ep={ep} must divide tp*dp={tp * dp} (the ep group is taken from the devices of one pipeline stage)"
    if experts and ep == 1 and meta["moe_intermediate_size"] % tp:
        size = meta["moe_intermediate_size"]
        return f"tp={tp} does not divide moe_intermediate_size={size} (with ep=1 experts are tp-split)"
    if problem := positions_problem(workload, meta.get("max_positions")):
        return problem
    if pp > meta["num_layers"]:
        return f"pp={pp} > num_hidden_layers={meta['num_layers']}"
    if workload.batch % (dp * workload.microbatches):
        return f"batch={workload.batch} is not divisible by dp*microbatches={dp * workload.microbatches}"
    if workload.batch % (dp * workload.shared_prefix):
        return (f"batch={workload.batch} is not divisible by dp*shared_prefix={dp * workload.shared_prefix} (each "
                f"replica holds whole groups of rows sharing a prompt)")
    if hw.peak_flops(workload.dtype) is None:
        return f"hardware {hw.name} has no {workload.dtype} peak (peak_tflops.{workload.dtype} is null)"
    return None


def positions_problem(workload: Workload, max_positions: int | None, node: str = "workload") -> str | None:
    """Why an inference workload's tokens (the prompt; decode: the cached context) are past the model's positions
    (hf_config.max_position_embeddings), or None; `node` names the key. None for a config without the key, and in
    train mode: a training run may extend the positions (megatron sets its max_sequence_length to the sequence)."""
    if max_positions is None or workload.mode == "train" or workload.kv_len <= max_positions:
        return None
    key = "context_len" if workload.mode == "decode" else "seq_len"
    return (f"{node}.{key}={workload.kv_len} is past the model's {max_positions} positions "
            f"(max_position_embeddings); valid: at most {max_positions}")


def _positive_int(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} is {value!r}; expected an integer >= 1")
    return value
