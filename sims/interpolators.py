"""The efficiency table's measured curves as interpolators, one per parsed hardware spec (each keeps
its cache of interpolated shapes): GEMMs by (m, n, k) (sims/calibration/gemm_interpolate.py), other ops by size
(sims/calibration/interpolate.py)."""

from __future__ import annotations

from sims.calibration.gemm_interpolate import GemmInterpolator
from sims.calibration.interpolate import OpInterpolator
from sims.hardware import HardwareSpec

WEIGHT_BYTES = {"bf16": 2, "fp8": 1, "fp32": 4}  # GEMM weight bytes per workload dtype


_INTERPOLATORS: dict[int, tuple[HardwareSpec, GemmInterpolator]] = {}


def gemm_interpolator(hw: HardwareSpec) -> GemmInterpolator | None:
    """One interpolator (and its cache of interpolated shapes) per parsed hardware spec."""
    if not hw.efficiency.gemm_measurements:
        return None
    key = id(hw)
    cached = _INTERPOLATORS.get(key)
    if cached is None or cached[0] is not hw:

        def memory_s(m: float, n: float, k: float, gemm_dtype: str) -> float:
            act_bytes = 4 if gemm_dtype == "fp32" else 2
            nbytes = (m * k + m * n) * act_bytes + k * n * WEIGHT_BYTES[gemm_dtype]
            return nbytes / hw.memory_bytes_per_s

        def roofline_s(m: float, n: float, k: float, gemm_dtype: str) -> float:
            return max(2.0 * m * n * k / hw.peak_flops(gemm_dtype), memory_s(m, n, k, gemm_dtype))

        floor_s = hw.efficiency.op_classes["gemm"].floor_us * 1e-6
        interpolator = GemmInterpolator(hw.efficiency.gemm_measurements, roofline_s, floor_s, memory_s)
        cached = _INTERPOLATORS[key] = (hw, interpolator)
    return cached[1]


_OP_INTERPOLATORS: dict[int, tuple[HardwareSpec, OpInterpolator]] = {}


def op_interpolator(hw: HardwareSpec) -> OpInterpolator | None:
    if not hw.efficiency.op_measurements:
        return None
    cached = _OP_INTERPOLATORS.get(id(hw))
    if cached is None or cached[0] is not hw:

        def roofline_s(op: str, dtype: str, flops: float, nbytes: float) -> tuple[float, str]:
            compute_s, memory_s = flops / hw.peak_flops(dtype), nbytes / hw.memory_bytes_per_s
            return max(compute_s, memory_s), "compute" if compute_s >= memory_s else "memory"

        cached = _OP_INTERPOLATORS[id(hw)] = (hw, OpInterpolator(hw.efficiency.op_measurements, roofline_s))
    return cached[1]
