"""A GEMM's time from measured shapes (median per shape): the fraction of its roofline time each shape
reached above the launch floor, read at a query's (m, n, k) and kept monotone in m.

A compute-bound m blends the nearest measured shapes in log2(m, n, k). A memory-bound m reads the
measured (n, k) "columns" instead: each column's fraction along m, then the nearest columns by (n, k)
(a column timed at compute-bound m's only is left out). At small m a GEMM streams its weight through
the kernel its (n, k) gets, whatever m is, so its time hardly moves with m; a distance in m is not
worth one in n or k there, and a blend over (m, n, k) mixed other shapes' kernels (and transformers'
two-GEMM k/v and gate/up nodes) into a measured column's own points (docs/simulator.md "Session 26").
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Callable

from sims.calibration.interpolate import _medians, _power_law, floor_below
from sims.calibration.table import GemmMeasurement

Shape = Callable[[float, float, float, str], float]


class GemmInterpolator:
    """GEMM time from measured shapes (median per shape). Each shape gives the fraction of its
    roofline time it achieved above the launch floor. For a query (m, n, k) the fraction is read at
    each measured m (same dtype) and four points per doubling of m between them, at this (n, k):
    where the shape is memory-bound (`memory_s`, the bytes at peak bandwidth, is its roofline) from
    the NEIGHBOURS nearest measured (n, k) in log2(n, k) that were timed at a memory-bound m, each
    log-linear in m between its measured m's (the end's beyond), inverse-distance weighted (the
    query's own (n, k) alone when measured); elsewhere the inverse-distance-weighted fraction of the
    NEIGHBOURS nearest shapes in log2(m, n, k). The times at those m are made non-decreasing in m
    (isotonic regression in log time: a dip and its neighbours become their geometric mean) and
    the fraction between them is log-linear in m (beyond the ends the end's fraction is kept).
    Exact at measured shapes whose time grows with m, and never faster for a larger m. Without
    `memory_s` every shape takes the (m, n, k) blend."""

    NEIGHBOURS = 4
    STEPS_PER_DOUBLING = 4

    def __init__(self, measurements: tuple[GemmMeasurement, ...], roofline_s: Shape, floor_s: float = 0.0,
                 memory_s: Shape | None = None):
        self._roofline_s, self._memory_s = roofline_s, memory_s
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
        self._columns: dict[str, dict[tuple[float, float], list[tuple[float, float]]]] = {}
        for d, shapes in by_dtype.items():
            columns: dict[tuple[float, float], list[tuple[float, float]]] = {}
            for (m, n, k, _), (_, f) in zip(shapes, self._points[d]):
                columns.setdefault((n, k), []).append((m, f))
            # a column timed at compute-bound m's only says nothing of streaming its weight
            self._columns[d] = {(math.log2(n), math.log2(k)): sorted(points) for (n, k), points in columns.items()
                                if any(self._memory_bound(m, n, k, d) for m, _ in points)}
        self._m_grid = {d: _m_grid([m for m, *_ in shapes]) for d, shapes in by_dtype.items()}
        self._curves: dict[tuple, list[float]] = {}
        self._cache: dict[tuple, float | None] = {}

    def time_s(self, m: float, n: float, k: float, dtype: str) -> float | None:
        """Interpolated time, or None when no measurement of this dtype exists."""
        key = (m, n, k, dtype)
        if key not in self._cache:
            self._cache[key] = self._interpolate(m, n, k, dtype) if dtype in self._points else None
        return self._cache[key]

    def _memory_bound(self, m: float, n: float, k: float, dtype: str) -> bool:
        return self._memory_s is not None and self._memory_s(m, n, k, dtype) >= self._roofline_s(m, n, k, dtype)

    def _fractions(self, ms: list[float], n: float, k: float, dtype: str) -> list[float]:
        """The fraction at each m, for one (n, k): the n and k terms of every squared distance are computed once."""
        points, columns = self._points[dtype], self._columns[dtype]
        qn, qk = math.log2(max(n, 1)), math.log2(max(k, 1))
        nk_terms = [((qn - pn) ** 2, (qk - pk) ** 2, pm, f) for (pm, pn, pk), f in points]
        nearest_columns = heapq.nsmallest(self.NEIGHBOURS, (((qn - cn) ** 2 + (qk - ck) ** 2, column)
                                                            for (cn, ck), column in columns.items()),
                                          key=lambda pair: pair[0])
        out = []
        for m in ms:
            if nearest_columns and self._memory_bound(m, n, k, dtype):
                out.append(_weighted([(d, _along_m(column, m)) for d, column in nearest_columns]))
                continue
            qm = math.log2(max(m, 1))
            out.append(_weighted(heapq.nsmallest(self.NEIGHBOURS,
                                                 [((qm - pm) ** 2 + dn + dk, f) for dn, dk, pm, f in nk_terms])))
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


def _weighted(nearest: list[tuple[float, float]]) -> float:
    """Inverse-(squared-)distance-weighted value of (squared distance, value) pairs, nearest first; an exact match
    alone."""
    if nearest[0][0] == 0.0:
        return nearest[0][1]
    weights = [1.0 / d for d, _ in nearest]
    return sum(w * f for w, (_, f) in zip(weights, nearest)) / sum(weights)


def _along_m(column: list[tuple[float, float]], m: float) -> float:
    """A column's fraction at m: log-linear in m between its measured m's, the end's beyond them."""
    ms = [pm for pm, _ in column]
    i = bisect_left(ms, m)
    if i < len(ms) and ms[i] == m:
        return column[i][1]
    if i == 0 or i == len(ms):
        return column[0 if i == 0 else -1][1]
    (m0, f0), (m1, f1) = column[i - 1], column[i]
    return _power_law(m, m0, m1, f0, f1)


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
