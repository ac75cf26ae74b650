"""Intermediate representation: a model's forward pass as a flat list of operator nodes.

A node describes one kernel of one decoder layer (or of the embedding/head) with symbolic shapes.
Layers of the same kind share one node whose `layers` lists every decoder-layer index it runs in,
so a 94-layer model is still ~20 nodes and evaluating it stays cheap.

Symbolic dimensions (bound per device and micro-batch by the calculator):
  batch         sequences
  seq_len       new tokens per sequence in this step (prompt length in prefill, 1 in decode)
  kv_len        keys each new token can attend to (prompt length in prefill, context in decode)
  tokens        batch * seq_len
  logit_tokens  tokens whose logits are computed (batch in inference, tokens in training)
  routed_tokens tokens * top_k: token-expert pairs of a MoE layer

Weight shapes are in math order (in_features, out_features), unlike torch's (out, in).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from framework.core.errors import ConfigError

Dim = int | str
Shape = tuple[Dim, ...]

SYMBOLIC_DIMS = ("batch", "seq_len", "kv_len", "tokens", "logit_tokens", "routed_tokens")
OP_TYPES = (
    "gemm",  # y = x @ W (+b); weight (*head_batch, K, N)
    "moe_gemm",  # grouped GEMM over routed tokens; weight (experts, K, N)
    "attention",  # fused (flash) attention; attrs give heads and head widths
    "norm",  # RMSNorm
    "elementwise",  # activation * gate, rotary embedding, ...
    "embedding",  # row gather from the embedding table
    "router",  # MoE gate GEMM + top-k
    "all_reduce",
    "all_gather",
    "all_to_all",
)
COMM_TYPES = ("all_reduce", "all_gather", "all_to_all")
# How tensor parallelism splits an op (Megatron/vLLM terms):
#   column: weight's output dim split, output activation split
#   row: weight's input dim split, input activation split (an all-reduce follows)
#   heads: attention heads split (inputs and outputs split)
#   vocab: embedding rows split (an all-reduce follows)
#   sharded: weightless op on an already split activation
#   replicated: every tp rank runs the whole op
TP_MODES = ("column", "row", "heads", "vocab", "sharded", "replicated")
COMM_GROUPS = ("tp", "ep")
# When a collective runs: always, only without expert parallelism, or only with it.
COMM_WHEN = ("always", "ep_is_1", "ep_gt_1")


@dataclass(frozen=True)
class ParallelSpec:
    """How one op is split over devices.

    tp_dim: index of the weight dimension split by tensor parallelism (None: not split).
    expert_parallel: weight dim 0 indexes experts, which ep splits (whole experts per device).
    group / when: for collectives, the process group and the condition under which it runs.
    """

    tp_mode: str = "replicated"
    tp_dim: int | None = None
    expert_parallel: bool = False
    group: str | None = None
    when: str = "always"

    def __post_init__(self):
        _check_choice("parallel.tp_mode", self.tp_mode, TP_MODES)
        _check_choice("parallel.when", self.when, COMM_WHEN)
        if self.group is not None:
            _check_choice("parallel.group", self.group, COMM_GROUPS)


@dataclass(frozen=True)
class OpNode:
    """One kernel. `layers`: decoder-layer indices it runs in; -1 means before the first layer
    (embedding) and num_layers after the last (final norm, lm_head). repeat = len(layers)."""

    name: str
    op_type: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    weights: tuple[Shape, ...] = ()
    dtype: str = "bf16"
    parallel: ParallelSpec = field(default_factory=ParallelSpec)
    layers: tuple[int, ...] = ()
    is_attention: bool = False
    is_moe: bool = False
    is_mla: bool = False
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        _check_choice(f"op {self.name!r} op_type", self.op_type, OP_TYPES)
        if not self.layers:
            raise ConfigError(f"op {self.name!r}: layers is empty; list the layer indices it runs in")
        for shape in (*self.inputs, *self.outputs, *self.weights):
            for dim in shape:
                if isinstance(dim, str) and dim not in SYMBOLIC_DIMS:
                    raise ConfigError(
                        f"op {self.name!r}: unknown symbolic dim {dim!r}; valid: {', '.join(SYMBOLIC_DIMS)}"
                    )
        for key, value in self.attrs.items():
            if not isinstance(value, (bool, int, float, str)):
                raise ConfigError(f"op {self.name!r}: attrs[{key!r}] must be a scalar, got {type(value).__name__}")

    @property
    def repeat(self) -> int:
        return len(self.layers)

    @property
    def is_comm(self) -> bool:
        return self.op_type in COMM_TYPES

    def to_dict(self) -> dict:
        record = asdict(self)
        record["inputs"] = [list(s) for s in self.inputs]
        record["outputs"] = [list(s) for s in self.outputs]
        record["weights"] = [list(s) for s in self.weights]
        record["layers"] = list(self.layers)
        return record

    @classmethod
    def from_dict(cls, record: dict) -> "OpNode":
        fields = dict(record)
        for key in ("inputs", "outputs", "weights"):
            fields[key] = tuple(tuple(shape) for shape in fields.get(key, ()))
        fields["layers"] = tuple(fields["layers"])
        fields["parallel"] = ParallelSpec(**fields.get("parallel", {}))
        return cls(**fields)


@dataclass
class ComputationalGraph:
    """The forward pass of one model for one mode. `meta` holds the architecture numbers the
    calculator and the layout checks need (layers, heads, experts, ...)."""

    name: str
    mode: str
    nodes: list[OpNode]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(
            {"name": self.name, "mode": self.mode, "meta": self.meta, "nodes": [n.to_dict() for n in self.nodes]},
            indent=indent,
        )

    @classmethod
    def from_json(cls, text: str) -> "ComputationalGraph":
        record = json.loads(text)
        meta = {k: tuple(v) if isinstance(v, list) else v for k, v in record["meta"].items()}
        nodes = [OpNode.from_dict(n) for n in record["nodes"]]
        return cls(name=record["name"], mode=record["mode"], nodes=nodes, meta=meta)

    def node(self, name: str) -> OpNode:
        for candidate in self.nodes:
            if candidate.name == name:
                return candidate
        raise KeyError(f"no op named {name!r} in graph {self.name!r}")

    def table(self) -> str:
        """A fixed-width text table of the nodes, one line each."""
        header = ("name", "op", "x", "inputs", "weights", "outputs", "tp", "ep", "flags")
        lines = [header]
        for n in self.nodes:
            flags = ",".join(f for f, on in (("attn", n.is_attention), ("moe", n.is_moe), ("mla", n.is_mla)) if on)
            tp = n.parallel.tp_mode if n.parallel.group is None else f"{n.parallel.group}:{n.parallel.when}"
            lines.append(
                (
                    n.name,
                    n.op_type,
                    str(n.repeat),
                    _shapes(n.inputs),
                    _shapes(n.weights),
                    _shapes(n.outputs),
                    tp + ("" if n.parallel.tp_dim is None else f"[{n.parallel.tp_dim}]"),
                    "yes" if n.parallel.expert_parallel else "",
                    flags,
                )
            )
        widths = [max(len(row[i]) for row in lines) for i in range(len(header))]
        rendered = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in lines]
        rendered.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([f"{self.name} ({self.mode})", *rendered])


def _shapes(shapes: tuple[Shape, ...]) -> str:
    return " ".join("(" + ",".join(str(d) for d in s) + ")" for s in shapes)


def _check_choice(key: str, value: Any, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{key} is {value!r}; valid: {', '.join(valid)}")
