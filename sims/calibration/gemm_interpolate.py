"""A GEMM's time from measured shapes (median per shape): the fraction of its roofline time each shape
reached above the launch floor, read at a query's (m, n, k) and kept monotone in m."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable

from sims.calibration.interpolate import _medians, _power_law, floor_below
from sims.calibration.table import GemmMeasurement


class GemmInterpolator:
    """GEMM time from measured shapes (median per shape). Each shape gives the fraction of its
    roofline time it achieved above the launch floor; for a query (m, n, k) the fraction at each
    measured m (same dtype) is the inverse-distance-weighted fraction of the 4 nearest shapes in
    log2(m, n, k), giving an above-floor time at each measured m and four points per doubling of m
    between them, at this (n, k); those times are made non-decreasing in m (isotonic regression in
    log time: a dip and its neighbours become their geometric mean) and the fraction between them
    is log-linear in m (beyond the ends the end's fraction is kept). Exact at measured shapes whose
    time grows with m, and never faster for a larger m."""

    NEIGHBOURS = 4
    STEPS_PER_DOUBLING = 4

    def __init__(
        self,
        measurements: tuple[GemmMeasurement, ...],
        roofline_s: Callable[[float, float, float, str], float],
        floor_s: float = 0.0,
    ):
        self._roofline_s = roofline_s
        times = _medians(((g.dtype, g.m, g.n, g.k), g.time_us * 1e-6) for g in measurements)
        by_dtype: dict[str, list] = {}
        for (dtype, m, n, k), t in times.items():
            by_dtype.setdefault(dtype, []).append((m, n, k, t))
        self._floors = {d: floor_below(floor_s, [t for *_, t in shapes]) for d, shapes in by_dtype.items()}
        self._points = {
            d: [((math.log2(m), math.log2(n), math.log2(k)), roofline_s(m, n, k, d) / (t - self._floors[d]))
                for m, n, k, t in shapes]
            for d, shapes in by_dtype.items()
        }
        self._m_grid = {d: _m_grid([m for m, *_ in shapes]) for d, shapes in by_dtype.items()}
        self._curves: dict[tuple, list[float]] = {}
        self._cache: dict[tuple, float | None] = {}

    def time_s(self, m: float, n: float, k: float, dtype: str) -> float | None:
        """Interpolated time, or None when no measurement of this dtype exists."""
        key = (m, n, k, dtype)
        if key not in self._cache:
            self._cache[key] = self._interpolate(m, n, k, dtype) if dtype in self._points else None
        return self._cache[key]

    def _fractions(self, ms: list[float], n: float, k: float, dtype: str) -> list[float]:
        """The inverse-distance-weighted fraction of the NEIGHBOURS nearest shapes (ties by fraction)
        at each m, for one (n, k): the n and k terms of every squared distance are computed once."""
        points = self._points[dtype]
        qn, qk = math.log2(max(n, 1)), math.log2(max(k, 1))
        nk_terms = [((qn - pn) ** 2, (qk - pk) ** 2, pm, f) for (pm, pn, pk), f in points]
        out = []
        for m in ms:
            qm = math.log2(max(m, 1))
            nearest = heapq.nsmallest(self.NEIGHBOURS, [((qm - pm) ** 2 + dn + dk, f) for dn, dk, pm, f in nk_terms])
            if nearest[0][0] == 0.0:
                out.append(nearest[0][1])
                continue
            weights = [1.0 / d for d, _ in nearest]
            out.append(sum(w * f for w, (_, f) in zip(weights, nearest)) / sum(weights))
        return out

    def _above_floor_curve(self, n: float, k: float, dtype: str) -> list[float]:
        key = (n, k, dtype)
        if key not in self._curves:
            grid = self._m_grid[dtype]
            fractions = self._fractions(grid, n, k, dtype)
            raw = [self._roofline_s(m, n, k, dtype) / f for m, f in zip(grid, fractions)]
            self._curves[key] = _isotonic(raw)
        return self._curves[key]

    def _interpolate(self, m: float, n: float, k: float, dtype: str) -> float:
        """Between measured m's the achieved fraction of the roofline is log-linear in m; the time
        is kept at or above the lower end's (log time is convex in log m there, so this keeps it
        monotone and below the upper end's)."""
        grid, curve = self._m_grid[dtype], self._above_floor_curve(n, k, dtype)
        roofline = self._roofline_s(m, n, k, dtype)
        i = bisect_left(grid, m)
        if i < len(grid) and grid[i] == m:
            above = curve[i]
        elif i == 0 or i == len(grid):
            end = 0 if i == 0 else len(grid) - 1  # keep the end's fraction
            above = curve[end] * roofline / self._roofline_s(grid[end], n, k, dtype)
        else:
            f0 = self._roofline_s(grid[i - 1], n, k, dtype) / curve[i - 1]
            f1 = self._roofline_s(grid[i], n, k, dtype) / curve[i]
            above = min(max(roofline / _power_law(m, grid[i - 1], grid[i], f0, f1), curve[i - 1]), curve[i])
        return self._floors[dtype] + above


def _m_grid(measured: list[int]) -> list[float]:
    """The measured m's plus four points per doubling in between: where a GEMM's fraction is read
    off its nearest measured shapes before being made monotone."""
    top = max(measured)
    steps = [2.0 ** (j / GemmInterpolator.STEPS_PER_DOUBLING)
             for j in range(int(math.log2(top) * GemmInterpolator.STEPS_PER_DOUBLING) + 1)]
    return sorted({float(m) for m in measured} | {x for x in steps if x < top})


def _isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to `values` in log space (pool adjacent violators):
    where an estimate dips, it and its neighbours are replaced by their geometric mean."""
    blocks: list[list[float]] = []  # [mean log, count]
    for value in values:
        blocks.append([math.log(value), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (mean_a, n_a), (mean_b, n_b) = blocks.pop(-2), blocks.pop()
            blocks.append([(mean_a * n_a + mean_b * n_b) / (n_a + n_b), n_a + n_b])
    return [math.exp(mean) for mean, count in blocks for _ in range(count)]
