"""Efficiency tables: how far below peak each kind of kernel runs on one device.

File format (JSON), every section optional; what is left out keeps the built-in default:

    {
      "format": "crucible-efficiency-table/1",
      "device_name": "NVIDIA H100 SXM5 80GB",          # informational
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
latency_us: fixed cost of one collective. gemm_measurements: y = x @ W with x (m, k), W (k, n);
GEMMs of other shapes are interpolated between them (GemmInterpolator). op_measurements: an op's
time at the FLOPs and bytes the simulator counts for it; other sizes of the same op are
interpolated along its measured curve (OpInterpolator).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError

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

    def for_op(self, op_name: str, op_class: str) -> ClassEfficiency:
        """The op's own measured efficiency when the table has one, else its class's."""
        return self.ops.get(op_name) or self.op_classes[op_class]

    @classmethod
    def from_dict(cls, record: Mapping, origin: str = "efficiency table") -> "EfficiencyTable":
        """Validate a table; sections and classes it leaves out keep the defaults."""
        known = {"format", "device_name", "source", "op_classes", "ops", "links", "gemm_measurements",
                 "op_measurements"}
        _no_unknown(record, known, origin)
        if record.get("format", FORMAT) != FORMAT:
            raise ConfigError(f"{origin}: format is {record.get('format')!r}; valid: {FORMAT}")
        op_classes = dict(DEFAULT_OP_CLASSES)
        for name, values in (record.get("op_classes") or {}).items():
            _check_member(f"{origin}: op_classes", name, OP_CLASSES)
            _check_mapping(f"{origin}: op_classes.{name}", values)
            _no_unknown(values, {"compute", "memory", "floor_us"}, f"{origin}: op_classes.{name}")
            merged = {**asdict(op_classes[name]), **values}
            _check_fraction(f"{origin}: op_classes.{name}.compute", merged["compute"])
            _check_fraction(f"{origin}: op_classes.{name}.memory", merged["memory"])
            _check_non_negative(f"{origin}: op_classes.{name}.floor_us", merged["floor_us"])
            op_classes[name] = ClassEfficiency(**{k: float(v) for k, v in merged.items()})
        ops = {}
        for name, values in (record.get("ops") or {}).items():
            where = f"{origin}: ops.{name}"
            _check_mapping(where, values)
            _no_unknown(values, {"compute", "memory", "floor_us"}, where)
            missing = [key for key in ("compute", "memory", "floor_us") if key not in values]
            if missing:
                raise ConfigError(f"{where}: missing {', '.join(missing)}; each op needs compute, memory, floor_us")
            _check_fraction(f"{where}.compute", values["compute"])
            _check_fraction(f"{where}.memory", values["memory"])
            _check_non_negative(f"{where}.floor_us", values["floor_us"])
            ops[str(name)] = ClassEfficiency(**{k: float(v) for k, v in values.items()})
        links = dict(DEFAULT_LINKS)
        for name, values in (record.get("links") or {}).items():
            _check_member(f"{origin}: links", name, LINKS)
            _check_mapping(f"{origin}: links.{name}", values)
            _no_unknown(values, {"bandwidth", "latency_us"}, f"{origin}: links.{name}")
            merged = {**asdict(links[name]), **values}
            _check_fraction(f"{origin}: links.{name}.bandwidth", merged["bandwidth"])
            _check_non_negative(f"{origin}: links.{name}.latency_us", merged["latency_us"])
            links[name] = LinkEfficiency(**{k: float(v) for k, v in merged.items()})
        gemms = tuple(
            _gemm(entry, f"{origin}: gemm_measurements[{i}]")
            for i, entry in enumerate(record.get("gemm_measurements") or ())
        )
        op_times = tuple(
            _op_measurement(entry, f"{origin}: op_measurements[{i}]")
            for i, entry in enumerate(record.get("op_measurements") or ())
        )
        return cls(op_classes, links, gemms, record.get("device_name"), record.get("source", origin), ops, op_times)

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "device_name": self.device_name,
            "source": self.source,
            "op_classes": {name: asdict(value) for name, value in self.op_classes.items()},
            "ops": {name: asdict(value) for name, value in sorted(self.ops.items())},
            "links": {name: asdict(value) for name, value in self.links.items()},
            "gemm_measurements": [asdict(g) for g in self.gemm_measurements],
            "op_measurements": [asdict(m) for m in self.op_measurements],
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


class GemmInterpolator:
    """GEMM time from measured shapes. Each measurement gives the fraction of its roofline time it
    achieved above the launch floor; a query takes the inverse-distance-weighted fraction of the
    nearest measurements of the same dtype in log2(m, n, k) space and returns the floor plus its
    own roofline time divided by that fraction (exact at measured shapes). The fraction varies
    slowly with shape, so this interpolates far better than time; leaving the floor out of it
    keeps launch-bound shapes near the floor instead of scaling them with the roofline."""

    NEIGHBOURS = 4

    def __init__(
        self,
        measurements: tuple[GemmMeasurement, ...],
        roofline_s: Callable[[int, int, int, str], float],
        floor_s: float = 0.0,
    ):
        self._roofline_s = roofline_s
        times: dict[str, list[float]] = {}
        for g in measurements:
            times.setdefault(g.dtype, []).append(g.time_us * 1e-6)
        self._floors = {dtype: floor_below(floor_s, dtype_times) for dtype, dtype_times in times.items()}
        self._points: dict[str, list[tuple[tuple[float, float, float], float]]] = {}
        for g in measurements:
            fraction = roofline_s(g.m, g.n, g.k, g.dtype) / (g.time_us * 1e-6 - self._floors[g.dtype])
            self._points.setdefault(g.dtype, []).append(((math.log2(g.m), math.log2(g.n), math.log2(g.k)), fraction))
        self._cache: dict[tuple, float | None] = {}

    def time_s(self, m: float, n: float, k: float, dtype: str) -> float | None:
        """Interpolated time, or None when no measurement of this dtype exists."""
        key = (m, n, k, dtype)
        if key not in self._cache:
            self._cache[key] = self._interpolate(m, n, k, dtype)
        return self._cache[key]

    def _interpolate(self, m: float, n: float, k: float, dtype: str) -> float | None:
        points = self._points.get(dtype)
        if not points:
            return None
        query = (math.log2(max(m, 1)), math.log2(max(n, 1)), math.log2(max(k, 1)))
        nearest = sorted((sum((a - b) ** 2 for a, b in zip(query, p)), f) for p, f in points)[: self.NEIGHBOURS]
        if nearest[0][0] == 0.0:
            fraction = nearest[0][1]
        else:
            weights = [1.0 / d for d, _ in nearest]
            fraction = sum(w * f for w, (_, f) in zip(weights, nearest)) / sum(weights)
        return self._floors[dtype] + self._roofline_s(m, n, k, dtype) / fraction


class OpInterpolator:
    """An op's time from its measured curve. Points of one op and dtype are ordered by their
    roofline time r (FLOPs or bytes at peak, whichever is larger), separately for compute- and
    memory-bound sizes (attention in prefill and in decode). A query between two points takes
    their above-floor times interpolated as a power law in r (exact at the points); beyond the
    ends the nearest end's above-floor time scales with r (its efficiency is kept), so sizes
    below the smallest measured fall towards the floor."""

    def __init__(
        self,
        measurements: tuple[OpMeasurement, ...],
        roofline_s: Callable[[str, str, float, float], tuple[float, str]],
    ):
        self._roofline_s = roofline_s
        self._curves: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        for m in measurements:
            r, bound = roofline_s(m.op, m.dtype, m.flops, m.bytes)
            if r > 0:
                self._curves.setdefault((m.op, m.dtype, bound), []).append((r, m.time_us * 1e-6))
        for points in self._curves.values():
            points.sort()
        self._cache: dict[tuple, float | None] = {}

    def time_s(self, op: str, dtype: str, flops: float, nbytes: float, floor_s: float) -> float | None:
        """Interpolated time, or None when the op has no measurements of this dtype."""
        key = (op, dtype, flops, nbytes, floor_s)
        if key not in self._cache:
            self._cache[key] = self._interpolate(op, dtype, flops, nbytes, floor_s)
        return self._cache[key]

    def _interpolate(self, op: str, dtype: str, flops: float, nbytes: float, floor_s: float) -> float | None:
        r, bound = self._roofline_s(op, dtype, flops, nbytes)
        points = self._curves.get((op, dtype, bound)) or self._curves.get(
            (op, dtype, "memory" if bound == "compute" else "compute")
        )
        if not points:
            return None
        floor_s = floor_below(floor_s, [pt for _, pt in points])
        above = [(pr, pt - floor_s) for pr, pt in points]
        if r <= above[0][0]:
            return floor_s + above[0][1] * r / above[0][0]
        if r >= above[-1][0]:
            return floor_s + above[-1][1] * r / above[-1][0]
        upper = next(i for i, (pr, _) in enumerate(above) if pr >= r)
        (r0, t0), (r1, t1) = above[upper - 1], above[upper]
        if r1 == r0:
            return floor_s + t1
        share = math.log(r / r0) / math.log(r1 / r0)
        return floor_s + math.exp(math.log(t0) + share * (math.log(t1) - math.log(t0)))


def floor_below(floor_s: float, times_s: list[float]) -> float:
    """The floor an interpolator works with: the table's, but 5% under the fastest measurement, so
    that every measurement keeps a positive time above the floor and is reproduced exactly."""
    return min(floor_s, 0.95 * min(times_s))


def _op_measurement(entry: Mapping, origin: str) -> OpMeasurement:
    _check_mapping(origin, entry)
    _no_unknown(entry, {"op", "dtype", "flops", "bytes", "time_us"}, origin)
    missing = [key for key in ("op", "dtype", "flops", "bytes", "time_us") if key not in entry]
    if missing:
        needed = "op, dtype, flops, bytes, time_us"
        raise ConfigError(f"{origin}: missing {', '.join(missing)}; each op measurement needs {needed}")
    for key in ("flops", "bytes"):
        if not isinstance(entry[key], (int, float)) or entry[key] < 0:
            raise ConfigError(f"{origin}: {key} is {entry[key]!r}; expected a number >= 0")
    if not isinstance(entry["time_us"], (int, float)) or entry["time_us"] <= 0:
        raise ConfigError(f"{origin}: time_us is {entry['time_us']!r}; expected a positive number")
    _check_member(f"{origin}: dtype", entry["dtype"], DTYPES)
    numbers = (float(entry[key]) for key in ("flops", "bytes", "time_us"))
    return OpMeasurement(str(entry["op"]), entry["dtype"], *numbers)


def _gemm(entry: Mapping, origin: str) -> GemmMeasurement:
    _check_mapping(origin, entry)
    _no_unknown(entry, {"m", "n", "k", "dtype", "time_us"}, origin)
    missing = [key for key in ("m", "n", "k", "dtype", "time_us") if key not in entry]
    if missing:
        raise ConfigError(f"{origin}: missing {', '.join(missing)}; each GEMM needs m, n, k, dtype, time_us")
    for key in ("m", "n", "k", "time_us"):
        if not isinstance(entry[key], (int, float)) or entry[key] <= 0:
            raise ConfigError(f"{origin}: {key} is {entry[key]!r}; expected a positive number")
    _check_member(f"{origin}: dtype", entry["dtype"], DTYPES)
    return GemmMeasurement(int(entry["m"]), int(entry["n"]), int(entry["k"]), entry["dtype"], float(entry["time_us"]))


def _no_unknown(record: Mapping, known: set[str], origin: str) -> None:
    unknown = sorted(set(record) - known)
    if unknown:
        raise ConfigError(f"{origin}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")


def _check_mapping(origin: str, value) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{origin} is {value!r}; expected an object")


def _check_member(origin: str, value, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{origin}: {value!r} is not valid; valid: {', '.join(valid)}")


def _check_fraction(origin: str, value) -> None:
    if not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{origin} is {value!r}; expected a fraction in (0, 1]")


def _check_non_negative(origin: str, value) -> None:
    if not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{origin} is {value!r}; expected a number >= 0")
