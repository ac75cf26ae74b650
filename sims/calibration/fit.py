"""Fit an efficiency table from micro-benchmark measurements.

A measurement is a dict, one of:
  kernel:     {"op_class": "gemm", "dtype": "bf16", "flops": F, "bytes": B, "time_us": T,
               "m": .., "n": .., "k": ..,     # m, n, k only for 2-D GEMMs (kept as gemm_measurements)
               "op": "q_proj"}                # optional: the IR node it times (fits an `ops` entry)
  collective: {"collective": "all_reduce" | "all_gather" | "all_to_all", "group": n,
               "bytes": B, "time_us": T}      # bytes as the calculator counts them

Per op class (kernel model: time = max(F / (peak * compute), B / (bw * memory)) + floor):
  floor_us  the shortest measured time of the class when that kernel's roofline time is under 10%
            of it (launch-dominated), else the default
  compute   median of (F / peak) / (time - floor) over compute-bound kernels (F/peak >= B/bw)
            that take at least 3x the floor
  memory    the same with B / bw over memory-bound kernels
Per op (measurements naming an IR node `op`, except GEMMs, which interpolate by shape): the same
fit over that op's measurements, falling back to its class's fitted values where it has none; the
measurements themselves are kept as op_measurements, whose curve the calculator follows.
Per link kind (time = wire_bytes / (bw * bandwidth) + latency): a least-squares line through
(wire bytes, time); latency = intercept, bandwidth = 1 / (slope * bw).
A class or link without usable measurements keeps its default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import median

from framework.core.errors import ConfigError
from sims.calibration.table import (
    OP_CLASSES,
    ClassEfficiency,
    EfficiencyTable,
    GemmMeasurement,
    LinkEfficiency,
    OpMeasurement,
)
from sims.hardware import HardwareSpec, hardware_spec

LAUNCH_DOMINATED = 0.1
ABOVE_FLOOR = 3.0
WIRE_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


def fit_table(
    measurements: Sequence[Mapping], hardware: Mapping, source: str = "sims.calibration.fit", stack: str | None = None
) -> EfficiencyTable:
    """The table for `hardware` from kernel (and collective) measurements of software `stack`."""
    hw = hardware_spec({**hardware, "efficiency_table": None})
    defaults = EfficiencyTable()
    kernels = [m for m in measurements if "op_class" in m]
    collectives = [m for m in measurements if "collective" in m]
    unknown = sorted({m["op_class"] for m in kernels} - set(OP_CLASSES))
    if unknown:
        raise ConfigError(f"measurements name unknown op_class {', '.join(unknown)}; valid: {', '.join(OP_CLASSES)}")
    op_classes = dict(defaults.op_classes)
    for name in OP_CLASSES:
        mine = [m for m in kernels if m["op_class"] == name]
        if mine:
            op_classes[name] = _fit_class(mine, hw, defaults.op_classes[name])
    ops = {}
    for name in sorted({m["op"] for m in kernels if m.get("op") and m["op_class"] != "gemm"}):
        mine = [m for m in kernels if m.get("op") == name]
        classes = {m["op_class"] for m in mine}
        if len(classes) > 1:
            raise ConfigError(f"measurements of op {name!r} name several op classes ({', '.join(sorted(classes))})")
        ops[name] = _fit_class(mine, hw, op_classes[classes.pop()])
    links = dict(defaults.links)
    for kind in links:
        mine = [m for m in collectives if _link_kind(m, hw) == kind]
        if len({_wire_bytes(m) for m in mine}) >= 2:
            links[kind] = _fit_link(mine, hw, kind)
    gemms = tuple(
        GemmMeasurement(int(m["m"]), int(m["n"]), int(m["k"]), m["dtype"], float(m["time_us"]))
        for m in kernels
        if m["op_class"] == "gemm" and {"m", "n", "k"} <= set(m)
    )
    op_times = tuple(
        OpMeasurement(m["op"], m["dtype"], float(m["flops"]), float(m["bytes"]), float(m["time_us"]), **_surface_point(m))
        for m in kernels
        if m.get("op") and m["op_class"] != "gemm"
    )
    return replace(
        defaults,
        op_classes=op_classes,
        ops=ops,
        op_measurements=op_times,
        links=links,
        gemm_measurements=gemms,
        device_name=hw.name,
        source=source,
        stack=stack,
    )


def _surface_point(m: Mapping) -> dict:
    """Decode attention keeps its batch and KV length: its time is a surface over both."""
    if m["op_class"] == "attention" and m.get("mode") == "decode" and "batch" in m and "kv_len" in m:
        return {"batch": int(m["batch"]), "kv_len": int(m["kv_len"])}
    return {}


def _fit_class(measurements: Sequence[Mapping], hw: HardwareSpec, default: ClassEfficiency) -> ClassEfficiency:
    timed = []
    for m in measurements:
        peak = hw.peak_flops(m.get("dtype", "bf16"))
        if peak is None:
            raise ConfigError(
                f"hardware {hw.name} has no {m.get('dtype')} peak; cannot fit a {m['op_class']} measurement in it"
            )
        timed.append((m["flops"] / peak, m["bytes"] / hw.memory_bytes_per_s, m["time_us"] * 1e-6))
    launch = [t for compute, memory, t in timed if max(compute, memory) < LAUNCH_DOMINATED * t]
    # No kernel of the class is faster than its floor, launch-dominated or not.
    floor = min(min(launch) if launch else default.floor_us * 1e-6, min(t for _, _, t in timed))
    usable = [(c, mem, t) for c, mem, t in timed if t >= ABOVE_FLOOR * floor]
    compute = [c / (t - floor) for c, mem, t in usable if c >= mem]
    memory = [mem / (t - floor) for c, mem, t in usable if mem > c]
    return ClassEfficiency(
        compute=_fraction(median(compute)) if compute else default.compute,
        memory=_fraction(median(memory)) if memory else default.memory,
        floor_us=floor * 1e6,
    )


def _fit_link(measurements: Sequence[Mapping], hw: HardwareSpec, kind: str) -> LinkEfficiency:
    xs = [_wire_bytes(m) for m in measurements]
    ys = [m["time_us"] * 1e-6 for m in measurements]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
    intercept = mean_y - slope * mean_x
    _, bandwidth = hw.link(hw.devices_per_node if kind == "intra_node" else hw.devices_per_node + 1)
    return LinkEfficiency(
        bandwidth=_fraction(1.0 / (slope * bandwidth)) if slope > 0 else 1.0, latency_us=max(0.0, intercept) * 1e6
    )


def _wire_bytes(m: Mapping) -> float:
    return WIRE_FACTOR[m["collective"]](m["group"]) * m["bytes"]


def _link_kind(m: Mapping, hw: HardwareSpec) -> str:
    if m["collective"] not in WIRE_FACTOR:
        raise ConfigError(f"collective {m['collective']!r} is not valid; valid: {', '.join(WIRE_FACTOR)}")
    return "intra_node" if m["group"] <= hw.devices_per_node else "inter_node"


def _fraction(value: float) -> float:
    return min(1.0, max(1e-6, value))
