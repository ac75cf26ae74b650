"""Collective times: latency + bytes on the wire / bus bandwidth, per collective and group size.

    time = latency + bus_factor(n) * bytes / bus_bandwidth

with nccl-tests' conventions for `bytes` and the bus factor over n ranks:

    all_reduce      the buffer                       2 (n-1)/n
    all_gather      the gathered (output) tensor     (n-1)/n
    reduce_scatter  the full (input) tensor          (n-1)/n
    all_to_all      what one rank sends in all       (n-1)/n
    send_recv       the message                      1

An efficiency table's `collectives` section holds fitted (latency, bus bandwidth) per collective,
group size and link kind (sims/calibration/collectives.py measures them with NCCL). A group size
that was not measured takes the nearest measured one's bus bandwidth and its latency scaled by
(n-1)/(m-1) (ring steps). Without measurements for the collective and link kind: the hardware's
per-direction link bandwidth times the table's link efficiency, and the link's latency.
"""

from __future__ import annotations

import math

from sims.hardware import HardwareSpec

BUS_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
COLLECTIVES = tuple(BUS_FACTOR)


def collective_s(kind: str, nbytes: float, group: int, span: int, hw: HardwareSpec) -> float:
    """Seconds of one `kind` collective over `group` ranks spread over `span` consecutive ranks
    (span decides intra- or inter-node: a dp group strides over its tp ranks)."""
    if group <= 1 and kind != "send_recv":
        return 0.0
    latency_s, bus_bytes_per_s = link_model(kind, group, span, hw)
    return latency_s + BUS_FACTOR[kind](group) * nbytes / bus_bytes_per_s


def link_model(kind: str, group: int, span: int, hw: HardwareSpec) -> tuple[float, float]:
    """(latency s, bus bytes/s) of a collective: measured when the table has it, else built in."""
    link_kind, bandwidth = hw.link(max(span, group))
    fitted = _nearest_fit(hw, kind, group, link_kind)
    if fitted is not None:
        return fitted
    link = hw.efficiency.links[link_kind]
    return link.latency_us * 1e-6, bandwidth * link.bandwidth


def _nearest_fit(hw: HardwareSpec, kind: str, group: int, link_kind: str) -> tuple[float, float] | None:
    fits = hw.efficiency.collective_fits.get((kind, link_kind))
    if not fits:
        return None
    nearest = min(fits, key=lambda f: (abs(math.log2(f.group) - math.log2(max(group, 1))), -f.group))
    steps = (group - 1) / (nearest.group - 1) if nearest.group > 1 and kind != "send_recv" else 1.0
    return nearest.latency_us * 1e-6 * steps, nearest.bus_gb_s * 1e9
