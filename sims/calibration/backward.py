"""Backward/forward time ratios from an efficiency table's backward measurements.

An op's backward (GEMM dgrad + wgrad, flash attention's backward, the norm's and activation's
backward, the loss's gradient) is timed next to its forward at the same size. The simulator
multiplies the forward time it predicts for an op by that op's ratio:

  - at a measured size, the measured backward_us / forward_us (repeats: their median);
  - between measured sizes, the ratio linear in log(forward time), by the forward time the
    measurements had; beyond them, the nearest measured ratio;
  - an op with no measurement of its own: the median ratio of its class's measured graph ops (by
    sims.calculator.OP_CLASS; the training work outside the graph, e.g. the loss, counts for itself
    only); nothing in the class: the flat default (2x).

The ratio, rather than the measured backward time itself, is what moves to other cards and
models: a backward kernel runs about as far below its forward as it does on the card it was
measured on, while the forward times of a table follow its own measurements.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from statistics import median

from sims.calibration.table import BackwardMeasurement
from sims.train_work import OUTSIDE_GRAPH_OPS


class BackwardRatios:
    def __init__(self, measurements: Iterable[BackwardMeasurement], default: float):
        by_op: dict[str, dict[float, list[float]]] = {}
        op_class: dict[str, str] = {}
        for m in measurements:
            by_op.setdefault(m.op, {}).setdefault(m.forward_us, []).append(m.time_us / m.forward_us)
            op_class[m.op] = m.op_class
        self.curves = {op: sorted((math.log(fwd), median(r)) for fwd, r in sizes.items()) for op, sizes in by_op.items()}
        per_class: dict[str, list[float]] = {}
        for op, curve in self.curves.items():
            if op not in OUTSIDE_GRAPH_OPS:
                per_class.setdefault(op_class[op], []).append(median(r for _, r in curve))
        self.class_ratio = {cls: median(ratios) for cls, ratios in per_class.items()}
        self.default = default

    def ratio(self, op: str, op_class: str, forward_s: float) -> float:
        """Backward time / forward time of `op` (of `op_class`) whose forward takes `forward_s`."""
        curve = self.curves.get(op)
        if curve is None:
            return self.class_ratio.get(op_class, self.default)
        x = math.log(max(forward_s * 1e6, 1e-9))
        xs = [p[0] for p in curve]
        i = bisect.bisect_left(xs, x)
        if i == 0:
            return curve[0][1]
        if i == len(curve):
            return curve[-1][1]
        (x0, r0), (x1, r1) = curve[i - 1], curve[i]
        return r0 + (r1 - r0) * (x - x0) / (x1 - x0)
