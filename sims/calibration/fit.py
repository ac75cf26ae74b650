"""Fit an efficiency table from micro-benchmark measurements.

A measurement is a dict, one of:
  kernel:     {"op_class": "gemm", "dtype": "bf16", "flops": F, "bytes": B, "time_us": T,
               "m": .., "n": .., "k": ..,     # m, n, k only for 2-D GEMMs (kept as gemm_measurements)
               "op": "q_proj"}                # optional: the IR node it times (fits an `ops` entry)
  backward:   {"pass": "backward", "op": "qkv_proj", "op_class": "gemm", "dtype": "bf16", "flops": F, "bytes": B,
               "forward_us": Tf, "time_us": Tb}  # an op's backward next to its forward (kept as
               # backward_measurements; the forward FLOPs and bytes; sims/calibration/backward.py)
  collective: {"collective": "all_reduce" | "all_gather" | "reduce_scatter" | "all_to_all" | "send_recv",
               "group": n, "bytes": B, "time_us": T, "link": "intra_node"}  # nccl-tests' bytes (sims/comm.py);
               # link optional: by group size against devices_per_node

Per op class (kernel model: time = max(F / (peak * compute), B / (bw * memory)) + floor):
  floor_us  the shortest measured time of the class when that kernel's roofline time is under 10%
            of it (launch-dominated), else the default
  compute   median of (F / peak) / (time - floor) over compute-bound kernels (F/peak >= B/bw)
            that take at least 3x the floor
  memory    the same with B / bw over memory-bound kernels
Per op (measurements naming an IR node `op`, except GEMMs, which interpolate by shape): the same
fit over that op's measurements, falling back to its class's fitted values where it has none; the
measurements themselves are kept as op_measurements, whose curve the calculator follows.
Per collective, group size and link kind (time = latency + bus_factor(n) * bytes / bus_bandwidth):
the line through (bus bytes, time) that minimises the squared relative error (small messages count
as much as large ones), latency >= 0; kept in the table's `collectives` section.
A class without usable measurements keeps its default; links keep theirs (the model of collectives
that were not measured).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import median

from framework.core.errors import ConfigError
from sims.calibration.interpolate import AttentionSurface, surface_key
from sims.calibration.table import (
    OP_CLASSES,
    BackwardMeasurement,
    ClassEfficiency,
    CollectiveFit,
    EfficiencyTable,
    GemmMeasurement,
    OpMeasurement,
)
from sims.comm import BUS_FACTOR
from sims.hardware import HardwareSpec, hardware_spec

LAUNCH_DOMINATED = 0.1
ABOVE_FLOOR = 3.0


def fit_table(
    measurements: Sequence[Mapping], hardware: Mapping, source: str = "sims.calibration.fit", stack: str | None = None
) -> EfficiencyTable:
    """The table for `hardware` from kernel (and collective) measurements of software `stack`."""
    hw = hardware_spec({**hardware, "efficiency_table": None})
    defaults = EfficiencyTable()
    kernels = [m for m in measurements if "op_class" in m and m.get("pass") != "backward"]
    backward = tuple(BackwardMeasurement(m["op"], m["op_class"], m["dtype"], float(m["flops"]), float(m["bytes"]),
                                         float(m["forward_us"]), float(m["time_us"]))
                     for m in measurements if m.get("pass") == "backward")
    collectives = [m for m in measurements if "collective" in m]
    unknown = sorted({m["op_class"] for m in kernels} - set(OP_CLASSES) | {m.op_class for m in backward} - set(OP_CLASSES))
    if unknown:
        raise ConfigError(f"measurements name unknown op_class {', '.join(unknown)}; valid: {', '.join(OP_CLASSES)}")
    op_classes = dict(defaults.op_classes)
    for name in OP_CLASSES:  # own_op_only: the loss, the gradient accumulation (not a graph node's class)
        mine = [m for m in kernels if m["op_class"] == name and not m.get("own_op_only")]
        if mine:
            op_classes[name] = _fit_class(mine, hw, defaults.op_classes[name])
    ops = {}
    for name in sorted({m["op"] for m in kernels if m.get("op") and m["op_class"] != "gemm"}):
        mine = [m for m in kernels if m.get("op") == name]
        classes = {m["op_class"] for m in mine}
        if len(classes) > 1:
            raise ConfigError(f"measurements of op {name!r} name several op classes ({', '.join(sorted(classes))})")
        ops[name] = _fit_class(mine, hw, op_classes[classes.pop()])
    collective_fits = fit_collectives(collectives, hw)
    gemms = _gemm_shapes(kernels)
    op_times = _prefill_points_on_grids(tuple(
        OpMeasurement(m["op"], m["dtype"], float(m["flops"]), float(m["bytes"]), float(m["time_us"]), **_surface_point(m))
        for m in kernels
        if m.get("op") and m["op_class"] != "gemm"
    ))
    return replace(
        defaults,
        op_classes=op_classes,
        ops=ops,
        op_measurements=op_times,
        collectives=collective_fits,
        gemm_measurements=gemms,
        backward_measurements=backward,
        device_name=hw.name,
        source=source,
        stack=stack,
    )


def _gemm_shapes(kernels: Sequence[Mapping]) -> tuple[GemmMeasurement, ...]:
    """2-D GEMMs by shape. A plain GEMM (no `op`: sims/benchmarks/gemm_grid.py) at a shape some model's node was
    timed at is left out there: the node's record is what the stack runs at that shape (transformers runs its k/v and
    gate/up nodes as two GEMMs of half the width, recorded at the node's shape)."""
    shaped = [m for m in kernels if m["op_class"] == "gemm" and {"m", "n", "k"} <= set(m)]
    of_nodes = {(m["dtype"], m["m"], m["n"], m["k"]) for m in shaped if m.get("op")}
    return tuple(
        GemmMeasurement(int(m["m"]), int(m["n"]), int(m["k"]), m["dtype"], float(m["time_us"]))
        for m in shaped
        if m.get("op") or (m["dtype"], m["m"], m["n"], m["k"]) not in of_nodes
    )


def _surface_point(m: Mapping) -> dict:
    """Attention keeps its batch and length: decode its KV length, prefill its prompt length (a
    surface over both where they form a grid); a training step's forward its mode (the steps' own curve)."""
    if m["op_class"] != "attention" or "batch" not in m:
        return {}
    if m.get("mode") == "train":
        return {"mode": "train"}
    if m.get("mode") == "decode" and "kv_len" in m:
        return {"batch": int(m["batch"]), "kv_len": int(m["kv_len"])}
    if m.get("mode") == "prefill" and "seq_len" in m:
        return {"batch": int(m["batch"]), "seq_len": int(m["seq_len"])}
    return {}


def _prefill_points_on_grids(op_times: tuple[OpMeasurement, ...]) -> tuple[OpMeasurement, ...]:
    """Prefill points keep batch and seq_len only where they form a surface (a 2 x 2 grid or more):
    elsewhere the op's curve serves prefill, and a table fitted from measurements without a prefill
    grid stays as it was before prefill surfaces existed."""
    gridded = AttentionSurface.build_all(op_times, roofline_s=None)
    return tuple(
        replace(m, batch=None, seq_len=None)
        if m.seq_len is not None and surface_key(m) not in gridded
        else m
        for m in op_times
    )


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


def fit_collectives(measurements: Sequence[Mapping], hw: HardwareSpec) -> tuple[CollectiveFit, ...]:
    """One (latency, bus bandwidth) per collective, group size and link kind with two or more sizes.
    Repeated sizes are reduced to their median time first."""
    groups: dict[tuple[str, int, str], dict[float, list[float]]] = {}
    for m in measurements:
        if m["collective"] not in BUS_FACTOR:
            raise ConfigError(f"collective {m['collective']!r} is not valid; valid: {', '.join(BUS_FACTOR)}")
        link = m.get("link") or ("intra_node" if m["group"] <= hw.devices_per_node else "inter_node")
        groups.setdefault((m["collective"], int(m["group"]), link), {}).setdefault(float(m["bytes"]), []).append(
            m["time_us"] * 1e-6)
    fits = []
    for (kind, group, link), sizes in sorted(groups.items()):
        if len(sizes) < 2:
            continue
        points = [(BUS_FACTOR[kind](group) * size, median(times)) for size, times in sizes.items()]
        latency, seconds_per_byte = _relative_line(points)
        fits.append(CollectiveFit(kind, group, link, latency * 1e6, 1e-9 / seconds_per_byte))
    return tuple(fits)


def _relative_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(a >= 0, b > 0) minimising sum(((a + b x - t) / t)^2): weighted least squares, weights 1/t^2."""
    w = [1.0 / t**2 for _, t in points]
    sw, sx, sxx = sum(w), sum(wi * x for wi, (x, _) in zip(w, points)), sum(wi * x * x for wi, (x, _) in zip(w, points))
    st, sxt = sum(wi * t for wi, (_, t) in zip(w, points)), sum(wi * x * t for wi, (x, t) in zip(w, points))
    det = sw * sxx - sx * sx
    a = (sxx * st - sx * sxt) / det if det else 0.0
    b = (sw * sxt - sx * st) / det if det else 0.0
    if a < 0 or b <= 0:  # refit through the origin: t = b x
        a, b = 0.0, sxt / sxx
    return a, b


def _fraction(value: float) -> float:
    return min(1.0, max(1e-6, value))
