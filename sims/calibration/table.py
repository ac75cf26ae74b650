"""Efficiency tables: how far below peak each kind of kernel runs on one device.

File format (JSON), every section optional; what is left out keeps the built-in default:

    {
      "format": "crucible-efficiency-table/1",
      "device_name": "NVIDIA H100 SXM5 80GB",          # informational
      "stack": "transformers",                          # the software stack measured (sims/stacks.yaml);
                                                        # absent: figures that hold for any stack
      "source": "how and when it was measured",         # informational
      "op_classes": {                                   # per op class, see OP_CLASSES
        "gemm": {"compute": 0.72, "memory": 0.80, "floor_us": 4.0},
        ...
      },
      "ops": {                                          # per IR node name; overrides its class
        "rotary": {"compute": 0.30, "memory": 0.20, "floor_us": 22.0},
        ...
      },
      "links": {                                        # collectives, per link kind
        "intra_node": {"bandwidth": 0.75, "latency_us": 10.0},
        "inter_node": {"bandwidth": 0.80, "latency_us": 20.0}
      },
      "gemm_measurements": [                            # optional per-shape GEMM timings
        {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16", "time_us": 180.5},
        ...
      ],
      "op_measurements": [                              # optional timings of other ops, by IR node name
        {"op": "rotary", "dtype": "bf16", "flops": 1.6e8, "bytes": 2.1e8, "time_us": 132.0},
        {"op": "attention", "dtype": "bf16", "flops": 2.7e8, "bytes": 5.4e8, "time_us": 190.0,
         "batch": 16, "kv_len": 8192},                  # decode: a point of the batch x KV surface
        {"op": "attention", "dtype": "bf16", "flops": 1.7e10, "bytes": 8.4e7, "time_us": 55.0,
         "batch": 8, "seq_len": 512},                   # prefill: a point of the batch x prompt surface
        ...
      ],
      "backward_measurements": [                        # optional backward timings, by IR node name
        {"op": "qkv_proj", "op_class": "gemm", "dtype": "bf16", "flops": 5.2e10, "bytes": 4.3e7, "forward_us": 80.1, "time_us": 171.3},
        ...
      ]
    }

compute: achieved FLOP/s over peak FLOP/s when compute-bound; memory: achieved bytes/s over peak
memory bandwidth when memory-bound; floor_us: the shortest time any kernel of the class takes
(launch and setup). Both count the FLOPs and bytes the simulator assigns to an op, so an op that
the measured software runs as several unfused kernels (transformers' RMSNorm: eight) shows up as a
higher floor and a lower memory efficiency; `ops` entries hold such per-op figures by IR node name
(`graph.table()` lists the names) and take precedence over the op's class.
bandwidth: achieved bus bandwidth over the link's per-direction peak;
latency_us: fixed cost of one collective (links: the built-in collective model, used for any
collective without a `collectives` fit). collectives: [{"collective": "all_reduce", "group": 2,
"link": "intra_node", "latency_us": 14.0, "bus_gb_s": 362.0}, ...], fitted to NCCL measurements
(sims/calibration/collectives.py; the model is in sims/comm.py). gemm_measurements: y = x @ W with x (m, k), W (k, n);
GEMMs of other shapes are interpolated between them (sims.calibration.interpolate). op_measurements:
an op's time at the FLOPs and bytes the simulator counts for it (decode attention also with its
batch and kv_len, prefill attention measured on a grid with its batch and seq_len, attention timed as
a training step's forward with "mode": "train"); other sizes are read off its measured curve or surface.
backward_measurements: the backward pass of an op (GEMM dgrad + wgrad, attention backward, ...)
measured next to its forward at the forward's FLOPs and bytes; the simulator takes backward/forward
ratios from them (sims/calibration/backward.py). A table without them keeps backward = 2x forward.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError
from sims.checks import check_fraction, check_mapping, check_member, check_non_negative, no_unknown
from sims.stacks import stacks

FORMAT = "crucible-efficiency-table/1"
OP_CLASSES = ("gemm", "moe", "attention", "norm", "elementwise", "embedding", "router", "optimizer")
LINKS = ("intra_node", "inter_node")
DTYPES = tuple(SHORT[name] for name in ("bfloat16", "float8", "float32"))  # framework.core.dtypes.SHORT


@dataclass(frozen=True)
class ClassEfficiency:
    compute: float
    memory: float
    floor_us: float


@dataclass(frozen=True)
class LinkEfficiency:
    bandwidth: float
    latency_us: float


@dataclass(frozen=True)
class OpMeasurement:
    op: str
    dtype: str
    flops: float
    bytes: float
    time_us: float
    batch: int | None = None  # decode attention: sequences and cached tokens (its batch x KV surface)
    kv_len: int | None = None
    seq_len: int | None = None  # prefill attention on a grid: with batch, its batch x prompt-length surface
    mode: str | None = None  # "train": attention timed as a training step's forward (the steps' own curve)


@dataclass(frozen=True)
class BackwardMeasurement:
    """An op's backward time measured next to its forward one, at the forward's FLOPs and bytes."""

    op: str
    op_class: str
    dtype: str
    flops: float
    bytes: float
    forward_us: float
    time_us: float


@dataclass(frozen=True)
class CollectiveFit:
    """time = latency_us + bus_factor(group) * bytes / bus_gb_s (sims/comm.py), fitted to NCCL timings."""

    collective: str
    group: int
    link: str  # intra_node | inter_node
    latency_us: float
    bus_gb_s: float


@dataclass(frozen=True)
class GemmMeasurement:
    m: int
    n: int
    k: int
    dtype: str
    time_us: float


# Uncalibrated starting points for a modern datacenter GPU (cuBLAS GEMMs reach ~70-80% of dense
# peak at large shapes, FlashAttention ~50-60%, grouped MoE GEMMs less; memory-bound kernels
# ~70-80% of HBM bandwidth; NCCL bus bandwidth ~75-80% of the link). Replace them with a measured
# table (sims.calibration.fit) before trusting absolute numbers.
DEFAULT_OP_CLASSES = {
    "gemm": ClassEfficiency(compute=0.75, memory=0.80, floor_us=4.0),
    "moe": ClassEfficiency(compute=0.60, memory=0.70, floor_us=6.0),
    "attention": ClassEfficiency(compute=0.55, memory=0.75, floor_us=5.0),
    "norm": ClassEfficiency(compute=0.30, memory=0.60, floor_us=3.0),
    "elementwise": ClassEfficiency(compute=0.30, memory=0.70, floor_us=3.0),
    "embedding": ClassEfficiency(compute=0.30, memory=0.50, floor_us=3.0),
    "router": ClassEfficiency(compute=0.30, memory=0.50, floor_us=5.0),
    "optimizer": ClassEfficiency(compute=0.30, memory=0.80, floor_us=5.0),
}
DEFAULT_LINKS = {
    "intra_node": LinkEfficiency(bandwidth=0.75, latency_us=10.0),
    "inter_node": LinkEfficiency(bandwidth=0.80, latency_us=20.0),
}


@dataclass(frozen=True)
class EfficiencyTable:
    op_classes: dict[str, ClassEfficiency] = field(default_factory=lambda: dict(DEFAULT_OP_CLASSES))
    links: dict[str, LinkEfficiency] = field(default_factory=lambda: dict(DEFAULT_LINKS))
    gemm_measurements: tuple[GemmMeasurement, ...] = ()
    device_name: str | None = None
    source: str = "built-in defaults"
    ops: dict[str, ClassEfficiency] = field(default_factory=dict)
    op_measurements: tuple[OpMeasurement, ...] = ()
    stack: str | None = None  # the software stack it was measured on; None: any stack
    collectives: tuple[CollectiveFit, ...] = ()
    backward_measurements: tuple[BackwardMeasurement, ...] = ()

    @cached_property
    def collective_fits(self) -> dict[tuple[str, str], list[CollectiveFit]]:
        """The fits by (collective, link kind)."""
        grouped: dict[tuple[str, str], list[CollectiveFit]] = {}
        for fit in self.collectives:
            grouped.setdefault((fit.collective, fit.link), []).append(fit)
        return grouped

    def for_op(self, op_name: str, op_class: str) -> ClassEfficiency:
        """The op's own measured efficiency when the table has one, else its class's."""
        return self.ops.get(op_name) or self.op_classes[op_class]

    @classmethod
    def from_dict(cls, record: Mapping, origin: str = "efficiency table") -> "EfficiencyTable":
        """Validate a table; sections and classes it leaves out keep the defaults."""
        known = {"format", "device_name", "source", "stack", "op_classes", "ops", "links", "collectives",
                 "gemm_measurements", "op_measurements", "backward_measurements"}
        no_unknown(origin, record, sorted(known))
        if record.get("format", FORMAT) != FORMAT:
            raise ConfigError(f"{origin}: format is {record.get('format')!r}; valid: {FORMAT}")
        op_classes = dict(DEFAULT_OP_CLASSES)
        for name, values in (record.get("op_classes") or {}).items():
            check_member(f"{origin}: op_classes", name, OP_CLASSES)
            check_mapping(f"{origin}: op_classes.{name}", values)
            no_unknown(f"{origin}: op_classes.{name}", values, sorted({"compute", "memory", "floor_us"}))
            merged = {**asdict(op_classes[name]), **values}
            check_fraction(f"{origin}: op_classes.{name}.compute", merged["compute"])
            check_fraction(f"{origin}: op_classes.{name}.memory", merged["memory"])
            check_non_negative(f"{origin}: op_classes.{name}.floor_us", merged["floor_us"])
            op_classes[name] = ClassEfficiency(**{k: float(v) for k, v in merged.items()})
        ops = {}
        for name, values in (record.get("ops") or {}).items():
            where = f"{origin}: ops.{name}"
            check_mapping(where, values)
            no_unknown(where, values, sorted({"compute", "memory", "floor_us"}))
            missing = [key for key in ("compute", "memory", "floor_us") if key not in values]
            if missing:
                raise ConfigError(f"{where}: missing {', '.join(missing)}; each op needs compute, memory, floor_us")
            check_fraction(f"{where}.compute", values["compute"])
            check_fraction(f"{where}.memory", values["memory"])
            check_non_negative(f"{where}.floor_us", values["floor_us"])
            ops[str(name)] = ClassEfficiency(**{k: float(v) for k, v in values.items()})
        links = dict(DEFAULT_LINKS)
        for name, values in (record.get("links") or {}).items():
            check_member(f"{origin}: links", name, LINKS)
            check_mapping(f"{origin}: links.{name}", values)
            no_unknown(f"{origin}: links.{name}", values, sorted({"bandwidth", "latency_us"}))
            merged = {**asdict(links[name]), **values}
            check_fraction(f"{origin}: links.{name}.bandwidth", merged["bandwidth"])
            check_non_negative(f"{origin}: links.{name}.latency_us", merged["latency_us"])
            links[name] = LinkEfficiency(**{k: float(v) for k, v in merged.items()})
        gemms = tuple(
            _gemm(entry, f"{origin}: gemm_measurements[{i}]")
            for i, entry in enumerate(record.get("gemm_measurements") or ())
        )
        op_times = tuple(
            _op_measurement(entry, f"{origin}: op_measurements[{i}]")
            for i, entry in enumerate(record.get("op_measurements") or ())
        )
        stack = record.get("stack")
        if stack is not None:
            check_member(f"{origin}: stack", stack, tuple(stacks()))
        collectives = tuple(
            _collective(entry, f"{origin}: collectives[{i}]") for i, entry in enumerate(record.get("collectives") or ())
        )
        backward = tuple(
            _backward(entry, f"{origin}: backward_measurements[{i}]")
            for i, entry in enumerate(record.get("backward_measurements") or ())
        )
        return cls(op_classes, links, gemms, record.get("device_name"), record.get("source", origin), ops, op_times,
                   stack, collectives, backward)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "device_name": self.device_name,
            "stack": self.stack,
            "source": self.source,
            "op_classes": {name: asdict(value) for name, value in self.op_classes.items()},
            "ops": {name: asdict(value) for name, value in sorted(self.ops.items())},
            "links": {name: asdict(value) for name, value in self.links.items()},
            "collectives": [asdict(c) for c in self.collectives],
            "gemm_measurements": [asdict(g) for g in self.gemm_measurements],
            "op_measurements": [{k: v for k, v in asdict(m).items() if v is not None} for m in self.op_measurements],
            **({"backward_measurements": [asdict(m) for m in self.backward_measurements]}
               if self.backward_measurements else {}),
        }


def load_table(path: str | Path) -> EfficiencyTable:
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"efficiency table {path} does not exist; set hardware.efficiency_table to a JSON file or null"
        ) from None
    except json.JSONDecodeError as error:
        raise ConfigError(f"efficiency table {path} is not valid JSON: {error}") from None
    if not isinstance(record, dict):
        raise ConfigError(f"efficiency table {path} must hold a JSON object; see sims/calibration/table.py")
    return EfficiencyTable.from_dict(record, origin=f"efficiency table {path}")


def save_table(table: EfficiencyTable, path: str | Path) -> None:
    Path(path).write_text(json.dumps(table.to_dict(), indent=2) + "\n")


def _op_measurement(entry: Mapping, origin: str) -> OpMeasurement:
    check_mapping(origin, entry)
    no_unknown(origin, entry, sorted({"op", "dtype", "flops", "bytes", "time_us", "batch", "kv_len", "seq_len",
                                      "mode"}))
    missing = [key for key in ("op", "dtype", "flops", "bytes", "time_us") if key not in entry]
    if missing:
        needed = "op, dtype, flops, bytes, time_us"
        raise ConfigError(f"{origin}: missing {', '.join(missing)}; each op measurement needs {needed}")
    for key in ("flops", "bytes"):
        if not isinstance(entry[key], (int, float)) or entry[key] < 0:
            raise ConfigError(f"{origin}: {key} is {entry[key]!r}; expected a number >= 0")
    if not isinstance(entry["time_us"], (int, float)) or entry["time_us"] <= 0:
        raise ConfigError(f"{origin}: time_us is {entry['time_us']!r}; expected a positive number")
    check_member(f"{origin}: dtype", entry["dtype"], DTYPES)
    numbers = (float(entry[key]) for key in ("flops", "bytes", "time_us"))
    point = {key: entry[key] for key in ("batch", "kv_len", "seq_len") if key in entry}
    for key, value in point.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{origin}: {key} is {value!r}; expected an integer >= 1")
    if "mode" in entry:
        check_member(f"{origin}: mode", entry["mode"], ("train",))
        point["mode"] = entry["mode"]
    return OpMeasurement(str(entry["op"]), entry["dtype"], *numbers, **point)


def _backward(entry: Mapping, origin: str) -> BackwardMeasurement:
    keys = ("op", "op_class", "dtype", "flops", "bytes", "forward_us", "time_us")
    check_mapping(origin, entry)
    no_unknown(origin, entry, sorted(set(keys)))
    missing = [key for key in keys if key not in entry]
    if missing:
        raise ConfigError(f"{origin}: missing {', '.join(missing)}; each backward measurement needs {', '.join(keys)}")
    for key in ("flops", "bytes"):
        check_non_negative(f"{origin}: {key}", entry[key])
    for key in ("forward_us", "time_us"):
        if not isinstance(entry[key], (int, float)) or entry[key] <= 0:
            raise ConfigError(f"{origin}: {key} is {entry[key]!r}; expected a positive number")
    check_member(f"{origin}: dtype", entry["dtype"], DTYPES)
    check_member(f"{origin}: op_class", entry["op_class"], OP_CLASSES)
    return BackwardMeasurement(str(entry["op"]), entry["op_class"], entry["dtype"], *(float(entry[k]) for k in keys[3:]))


def _collective(entry: Mapping, origin: str) -> CollectiveFit:
    from sims.comm import COLLECTIVES  # sims.comm reads tables through the hardware spec

    keys = ("collective", "group", "link", "latency_us", "bus_gb_s")
    check_mapping(origin, entry)
    no_unknown(origin, entry, sorted(set(keys)))
    missing = [key for key in keys if key not in entry]
    if missing:
        raise ConfigError(f"{origin}: missing {', '.join(missing)}; each collective fit needs {', '.join(keys)}")
    check_member(f"{origin}: collective", entry["collective"], COLLECTIVES)
    check_member(f"{origin}: link", entry["link"], LINKS)
    if isinstance(entry["group"], bool) or not isinstance(entry["group"], int) or entry["group"] < 2:
        raise ConfigError(f"{origin}: group is {entry['group']!r}; expected an integer >= 2")
    check_non_negative(f"{origin}: latency_us", entry["latency_us"])
    if not isinstance(entry["bus_gb_s"], (int, float)) or entry["bus_gb_s"] <= 0:
        raise ConfigError(f"{origin}: bus_gb_s is {entry['bus_gb_s']!r}; expected a positive number")
    return CollectiveFit(entry["collective"], entry["group"], entry["link"], float(entry["latency_us"]),
                         float(entry["bus_gb_s"]))


def _gemm(entry: Mapping, origin: str) -> GemmMeasurement:
    check_mapping(origin, entry)
    no_unknown(origin, entry, sorted({"m", "n", "k", "dtype", "time_us"}))
    missing = [key for key in ("m", "n", "k", "dtype", "time_us") if key not in entry]
    if missing:
        raise ConfigError(f"{origin}: missing {', '.join(missing)}; each GEMM needs m, n, k, dtype, time_us")
    for key in ("m", "n", "k", "time_us"):
        if not isinstance(entry[key], (int, float)) or entry[key] <= 0:
            raise ConfigError(f"{origin}: {key} is {entry[key]!r}; expected a positive number")
    check_member(f"{origin}: dtype", entry["dtype"], DTYPES)
    return GemmMeasurement(int(entry["m"]), int(entry["n"]), int(entry["k"]), entry["dtype"], float(entry["time_us"]))
