"""Measured times between measured sizes: other ops along their curve, attention over batch x KV
length (decode) and batch x prompt length (prefill); GEMMs by shape in sims/calibration/gemm_interpolate.py.

Repeated measurements of one size are reduced to their median first. Every interpolation works on
the time above the launch floor and is monotone in size: a GEMM's time never falls as m grows
(for fixed n, k), an op's time never falls as its roofline time grows, attention's on a surface never as
batch or length grows (measured points that break this, i.e. noise, are lifted to the running
maximum before interpolating).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from statistics import median

from sims.calibration.table import OpMeasurement


def floor_below(floor_s: float, times_s: list[float]) -> float:
    """The floor an interpolator works with: the table's, but 5% under the fastest measurement, so
    that every measurement keeps a positive time above the floor and is reproduced exactly."""
    return min(floor_s, 0.95 * min(times_s))


def _medians(pairs) -> dict:
    """{key: median of its values} for (key, value) pairs."""
    grouped: dict = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return {key: median(values) for key, values in grouped.items()}


def _power_law(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    """y between (x0, y0) and (x1, y1) on a straight line in log-log space (monotone when y1 >= y0)."""
    if x1 == x0 or y1 == y0:
        return y1
    share = math.log(x / x0) / math.log(x1 / x0)
    return min(max(y0 * (y1 / y0) ** share, min(y0, y1)), max(y0, y1))  # no rounding past the ends


def _running_max(values: list[float]) -> list[float]:
    out, top = [], 0.0
    for value in values:
        top = max(top, value)
        out.append(top)
    return out


class OpInterpolator:
    """An op's time from its measured curve (median per size). Points of one op and dtype are
    ordered by their roofline time r (FLOPs or bytes at peak, whichever is larger), separately for
    compute- and memory-bound sizes (attention in prefill and in decode); their above-floor times,
    lifted to the running maximum, are interpolated as a power law in r; beyond the ends the
    nearest end's efficiency is kept, so sizes below the smallest fall towards the floor.

    Attention measured on a full grid (decode: measurements carrying `batch` and `kv_len`; prefill:
    `batch` and `seq_len`) is read from that surface instead: see AttentionSurface. Attention timed as a
    training step's forward (`mode` "train") also makes a curve of its own, which training steps read."""

    def __init__(
        self,
        measurements: tuple[OpMeasurement, ...],
        roofline_s: Callable[[str, str, float, float], tuple[float, str]],
    ):
        self._roofline_s = roofline_s
        curves = _medians(((m.op, m.dtype, m.flops, m.bytes), m.time_us * 1e-6) for m in measurements)
        self._curves: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
        for (op, dtype, flops, nbytes), t in curves.items():
            r, bound = roofline_s(op, dtype, flops, nbytes)
            if r > 0:
                self._curves.setdefault((op, dtype, bound), []).append((r, t))
        # a training forward's points (mode "train": cuDNN keeps the softmax statistics, 1.4x a prefill at equal
        # FLOPs on an H200, session 24) also make the curve training steps read; the curves above keep them for
        # prefills of sizes no prefill was timed at (the xla tables' large ones, near an H100's ridge)
        trained = _medians(((m.op, m.dtype, m.flops, m.bytes), m.time_us * 1e-6) for m in measurements if m.mode)
        for (op, dtype, flops, nbytes), t in trained.items():
            r, _ = roofline_s(op, dtype, flops, nbytes)
            if r > 0:
                self._curves.setdefault((op, dtype, "train"), []).append((r, t))
        for points in self._curves.values():
            points.sort()
        self._surfaces = AttentionSurface.build_all(measurements, roofline_s)
        self._cache: dict[tuple, float | None] = {}

    def time_s(
        self, op: str, dtype: str, flops: float, nbytes: float, floor_s: float, batch: float | None = None,
        kv_len: float | None = None, seq_len: float | None = None, curve: str | None = None,
    ) -> float | None:
        """Interpolated time, or None when the op has no measurements of this dtype. batch with
        kv_len: a decode step's sequences and cached tokens; batch with seq_len: a prefill's
        sequences and prompt tokens (attention's surfaces). `curve` ("compute" or "memory") reads that
        curve whatever the size's roofline bound: attention's memory-bound curve holds the decode steps', and
        a training sequence near the ridge (GQA 4 at 512 tokens: as many bytes as FLOPs at peak) is still no
        decode step; "train" reads the points timed as a training step's forward alone (the compute-bound
        curve where a table has none)."""
        key = (op, dtype, flops, nbytes, floor_s, batch, kv_len, seq_len, curve)
        if key not in self._cache:
            mode, length = ("decode", kv_len) if kv_len is not None else ("prefill", seq_len)
            surface = AttentionSurface.pick(self._surfaces, op, dtype, mode, nbytes, batch, length)
            if surface is not None:
                self._cache[key] = surface.time_s(flops, nbytes, floor_s, batch, length)
            else:
                self._cache[key] = self._interpolate(op, dtype, flops, nbytes, floor_s, curve)
        return self._cache[key]

    def _interpolate(self, op: str, dtype: str, flops: float, nbytes: float, floor_s: float,
                     curve: str | None = None) -> float | None:
        r, bound = self._roofline_s(op, dtype, flops, nbytes)
        points = self._curves.get((op, dtype, curve)) if curve == "train" else None
        bound = "compute" if curve == "train" else curve or bound
        points = points or self._curves.get((op, dtype, bound)) or self._curves.get(
            (op, dtype, "memory" if bound == "compute" else "compute")
        )
        if not points:
            return None
        floor_s = floor_below(floor_s, [pt for _, pt in points])
        rs = [pr for pr, _ in points]
        above = _running_max([pt - floor_s for _, pt in points])
        if r <= rs[0]:
            return floor_s + above[0] * r / rs[0]
        if r >= rs[-1]:
            return floor_s + above[-1] * r / rs[-1]
        upper = bisect_left(rs, r)
        return floor_s + _power_law(r, rs[upper - 1], rs[upper], above[upper - 1], above[upper])


def surface_point(m: OpMeasurement) -> tuple[str, int, int] | None:
    """(mode, batch, length) of a measurement on an attention grid: decode over batch x KV length,
    prefill over batch x prompt length; None for a point of a one-axis curve."""
    if m.batch is None:
        return None
    if m.kv_len is not None:
        return "decode", m.batch, m.kv_len
    return ("prefill", m.batch, m.seq_len) if m.seq_len is not None else None


def surface_key(m: OpMeasurement) -> tuple[str, str, str, int] | None:
    """(op, dtype, mode, width class): the surface a grid point belongs to; None off the grids."""
    point = surface_point(m)
    if point is None:
        return None
    mode, batch, length = point
    return m.op, m.dtype, mode, _width_class(m.bytes, batch, length)


class AttentionSurface:
    """Attention's time over batch x length, from measurements on a full grid (median per point):
    decode over batch x KV length, prefill over batch x prompt length (many short prompts do not
    run like one long one of the same FLOPs). Efficiency = roofline time / (time - floor) is
    interpolated bilinearly in (log batch, log length); outside the grid the nearest edge's
    efficiency is kept. Measured times are first lifted to their running maximum along both axes.
    One surface per (op, dtype, mode, bytes per token rounded to a power of two), so a query takes
    the surface of the nearest width (decode: the KV bytes per cached token, kv heads x head dim
    per device, so 8B at tp=2 reads like a model with half its kv heads; prefill: q, output and
    K/V bytes per prompt token)."""

    def __init__(self, op: str, dtype: str, batches: list, lengths: list, times: dict, work: dict, roofline_s):
        self.op, self.dtype, self.batches, self.lengths = op, dtype, batches, lengths
        self._times, self._work, self._roofline_s = times, work, roofline_s
        self._log_eff: dict[float, list[list[float]]] = {}  # per floor

    @classmethod
    def build_all(cls, measurements, roofline_s) -> dict[tuple[str, str, str, int], "AttentionSurface"]:
        """{(op, dtype, mode, width): surface} for every group of grid points with a 2 x 2 grid or more."""
        groups: dict[tuple[str, str, str, int], list[tuple[int, int, OpMeasurement]]] = {}
        for m in measurements:
            key = surface_key(m)
            if key is not None:
                _, batch, length = surface_point(m)
                groups.setdefault(key, []).append((batch, length, m))
        surfaces = {}
        for key, points in groups.items():
            times = _full_grid(_medians(((b, n), m.time_us * 1e-6) for b, n, m in points))
            batches, lengths = sorted({b for b, _ in times}), sorted({n for _, n in times})
            if len(batches) >= 2 and len(lengths) >= 2:
                work = {(b, n): (m.flops, m.bytes) for b, n, m in points}
                surfaces[key] = cls(key[0], key[1], batches, lengths, times, work, roofline_s)
        return surfaces  # without a 2 x 2 grid the op's one-axis curve serves it

    @staticmethod
    def pick(surfaces: dict, op: str, dtype: str, mode: str, nbytes: float, batch, length) -> "AttentionSurface | None":
        if batch is None or length is None or not surfaces:
            return None
        # prefill: nearest to the exact log2 width (Qwen3-8B at tp=2, 13.3, takes the 14 of Qwen3 rather
        # than tie with a 12 of head dim 64); decode keeps the rounded width's nearest, as tables had it
        exact = math.log2(max(nbytes / (batch * length), 1.0))
        width = exact if mode == "prefill" else _width_class(nbytes, batch, length)
        candidates = [(abs(w - width), w) for (o, d, md, w) in surfaces if (o, d, md) == (op, dtype, mode)]
        return surfaces[(op, dtype, mode, min(candidates)[1])] if candidates else None

    def time_s(self, flops: float, nbytes: float, floor_s: float, batch: float, length: float) -> float:
        floor_s = floor_below(floor_s, list(self._times.values()))
        efficiency = math.exp(self._log_efficiency(floor_s, batch, length))
        return floor_s + self._roofline_s(self.op, self.dtype, flops, nbytes)[0] / efficiency

    def _grid(self, floor_s: float) -> list[list[float]]:
        """log efficiency per grid point, from above-floor times lifted to their running maximum
        along the length and then along batch."""
        if floor_s not in self._log_eff:
            above = [_running_max([self._times[(b, n)] - floor_s for n in self.lengths]) for b in self.batches]
            for j in range(len(self.lengths)):
                for i, value in enumerate(_running_max([row[j] for row in above])):
                    above[i][j] = value
            self._log_eff[floor_s] = [
                [math.log(self._roofline_s(self.op, self.dtype, *self._work[(b, n)])[0] / above[i][j])
                 for j, n in enumerate(self.lengths)]
                for i, b in enumerate(self.batches)
            ]
        return self._log_eff[floor_s]

    def _log_efficiency(self, floor_s: float, batch: float, length: float) -> float:
        e = self._grid(floor_s)
        i, s = _cell(self.batches, batch)
        j, t = _cell(self.lengths, length)
        return ((1 - s) * (1 - t) * e[i][j] + s * (1 - t) * e[i + 1][j]
                + (1 - s) * t * e[i][j + 1] + s * t * e[i + 1][j + 1])


def _full_grid(times: dict[tuple, float]) -> dict[tuple, float]:
    """The largest full batch x length product among the points: the row or column with the fewest
    points goes until every combination is present (off-grid extras, e.g. a calibration workload)."""
    while times:
        batches, lengths = {b for b, _ in times}, {n for _, n in times}
        if len(times) == len(batches) * len(lengths):
            return times
        rows = [(sum(1 for b, _ in times if b == x) / len(lengths), 0, x) for x in batches]
        columns = [(sum(1 for _, n in times if n == x) / len(batches), 1, x) for x in lengths]
        _, axis, value = min(rows + columns)
        times = {key: t for key, t in times.items() if key[axis] != value}
    return times


def _width_class(nbytes: float, batch: float, length: float) -> int:
    """log2 of the bytes moved per token (cached in decode, prompt in prefill), rounded: the width a
    surface describes."""
    return round(math.log2(max(nbytes / (batch * length), 1.0)))


def _cell(grid: list[float], x: float) -> tuple[int, float]:
    """(lower index, share towards the next) of x in a sorted grid, in log space, clamped to the ends."""
    x = min(max(x, grid[0]), grid[-1])
    i = min(max(bisect_left(grid, x) - 1, 0), len(grid) - 2)
    return i, math.log(x / grid[i]) / math.log(grid[i + 1] / grid[i])
