"""Interpolating measured times: medians of repeats, monotone in size, decode attention as a surface."""

import itertools
import math

import pytest
from sims_helpers import hardware, model_config

from sims import predict_op
from sims.calibration.gemm_interpolate import GemmInterpolator
from sims.calibration.interpolate import OpInterpolator
from sims.calibration.table import GemmMeasurement, OpMeasurement, load_table
from sims.interpolators import gemm_interpolator
from sims.hardware import hardware_spec


def gemm_roofline(m, n, k, dtype):
    return max(2.0 * m * n * k / 1e15, 2.0 * (m * k + m * n + k * n) / 3e12)


def memory_roofline(op, dtype, flops, nbytes):
    compute, memory = flops / 1e15, nbytes / 1e12
    return max(compute, memory), "compute" if compute >= memory else "memory"


def test_repeated_gemm_measurements_are_reduced_by_their_median():
    repeats = [GemmMeasurement(256, 1024, 1024, "bf16", t) for t in (10.0, 30.0, 11.0)]
    interpolator = GemmInterpolator(tuple(repeats), gemm_roofline)
    assert interpolator.time_s(256, 1024, 1024, "bf16") == pytest.approx(11e-6)


def test_repeated_op_measurements_are_reduced_by_their_median():
    repeats = [OpMeasurement("rotary", "bf16", 0.0, 1e7, t) for t in (40.0, 20.0, 22.0)]
    assert OpInterpolator(tuple(repeats), memory_roofline).time_s("rotary", "bf16", 0.0, 1e7, 0.0) == pytest.approx(22e-6)


def test_gemm_time_never_falls_as_m_grows_even_with_noisy_measurements():
    noisy = (GemmMeasurement(64, 4096, 4096, "bf16", 30.0), GemmMeasurement(128, 4096, 4096, "bf16", 25.0),
             GemmMeasurement(1024, 4096, 4096, "bf16", 80.0), GemmMeasurement(128, 8192, 4096, "bf16", 40.0))
    interpolator = GemmInterpolator(noisy, gemm_roofline, floor_s=4e-6)
    times = [interpolator.time_s(m, 4096, 4096, "bf16") for m in range(1, 4097, 7)]
    assert all(b >= a for a, b in zip(times, times[1:]))
    # the dip at m=128 and the m=64 point above it meet in between (isotonic regression)
    pooled = interpolator.time_s(128, 4096, 4096, "bf16")
    assert 25e-6 < pooled < 30e-6 and interpolator.time_s(64, 4096, 4096, "bf16") == pytest.approx(pooled)


def gemm_memory(m, n, k, dtype):
    return 2.0 * (m * k + m * n + k * n) / 3e12


def column(n, k, ms, fraction):
    """Shapes of one (n, k) timed at `ms`, each at `fraction` of its roofline (no floor)."""
    return [GemmMeasurement(m, n, k, "bf16", gemm_roofline(m, n, k, "bf16") / fraction * 1e6) for m in ms]


def test_a_memory_bound_gemm_reads_the_nearest_measured_n_k_at_its_own_m():
    # Llama-3.1-8B's down projection at 16 rows among Qwen3-8B's shapes: its own-shaped neighbour
    # (4096 x 12288), a square one and a k/v node that runs as two GEMMs (a low fraction), each at 8 and 64 rows
    columns = {(4096, 12288): (0.81, 0.72), (4096, 4096): (0.70, 0.70), (2048, 4096): (0.35, 0.35)}
    points = [p for (n, k), (f8, f64) in columns.items() for p in column(n, k, (8,), f8) + column(n, k, (64,), f64)]
    interpolator = GemmInterpolator(tuple(points), gemm_roofline, memory_s=gemm_memory)
    # each (n, k)'s fraction at 16 rows, log-linear in m between its 8 and 64, then weighted by 1 / distance^2
    at_16 = {nk: f8 * (f64 / f8) ** (1 / 3) for nk, (f8, f64) in columns.items()}
    weights = {nk: 1.0 / ((math.log2(nk[0] / 4096)) ** 2 + (math.log2(nk[1] / 14336)) ** 2) for nk in columns}
    fraction = sum(w * at_16[nk] for nk, w in weights.items()) / sum(weights.values())
    assert fraction == pytest.approx(0.773, abs=1e-3)
    roofline = gemm_roofline(16, 4096, 14336, "bf16")
    assert interpolator.time_s(16, 4096, 14336, "bf16") == pytest.approx(roofline / fraction)
    # without memory_s the blend over (m, n, k) takes the other shapes in as well: 0.72, 7% slower
    blended = GemmInterpolator(tuple(points), gemm_roofline).time_s(16, 4096, 14336, "bf16")
    assert blended > 1.05 * interpolator.time_s(16, 4096, 14336, "bf16")


def test_a_measured_memory_bound_gemm_is_exact_whatever_other_shapes_were_timed_at():
    # one shape timed at 16 and 64 rows only, a neighbour at 1-64 rows at a much higher fraction: the blend
    # over (m, n, k) read the neighbour between 16 and 64 rows and pooled the measured 16 rows down (an xla
    # table's 1152 x 896 at 16 rows: 3.3 us against the 5.8 timed)
    points = column(1152, 896, (16, 64), 0.3) + column(896, 896, (1, 2, 8, 16, 64), 0.9)
    interpolator = GemmInterpolator(tuple(points), gemm_roofline, memory_s=gemm_memory)
    for p in points:
        assert interpolator.time_s(p.m, p.n, p.k, "bf16") == pytest.approx(p.time_us * 1e-6)


def test_a_shape_timed_only_compute_bound_does_not_serve_a_memory_bound_m():
    # a vocabulary head timed at training rows only (compute-bound) and another timed at decode rows
    points = column(128256, 2048, (2048, 8192), 0.7) + column(151936, 2048, (1, 8, 64), 0.88)
    interpolator = GemmInterpolator(tuple(points), gemm_roofline, memory_s=gemm_memory)
    assert gemm_memory(16, 128256, 2048, "bf16") > 2.0 * 16 * 128256 * 2048 / 1e15
    roofline = gemm_roofline(16, 128256, 2048, "bf16")
    assert interpolator.time_s(16, 128256, 2048, "bf16") == pytest.approx(roofline / 0.88)
    assert interpolator.time_s(2048, 128256, 2048, "bf16") == pytest.approx(points[0].time_us * 1e-6)


@pytest.mark.parametrize("table", ["h100", "h200"])
def test_shipped_tables_give_gemm_times_monotone_in_m(table):
    hw = hardware_spec(hardware(table))
    interpolator = gemm_interpolator(hw)
    for n, k in ((4096, 4096), (6144, 4096), (2048, 768), (151936, 4096), (1024, 5120), (4096, 12288)):
        times = [interpolator.time_s(m, n, k, "bf16") for m in sorted({int(1.25**i) for i in range(60)})]
        assert all(b >= a for a, b in zip(times, times[1:])), (n, k)


def decode_grid(time_us):
    """Decode attention of 8 kv heads x 128 (4096 bytes per cached token) on a 3 x 3 grid."""
    points = []
    for batch, kv in itertools.product((1, 8, 64), (1024, 4096, 16384)):
        nbytes = batch * (kv * 4096 + 32 * 256 * 2)
        points.append(OpMeasurement("attention", "bf16", 2.0 * batch * kv * 32 * 256, nbytes,
                                    time_us(batch, kv, nbytes), batch=batch, kv_len=kv))
    return points


def test_decode_attention_surface_is_exact_on_the_grid_and_bilinear_in_log_space_between():
    # efficiency rises with batch and KV length: a surface no one-axis curve over bytes can follow
    def time_us(batch, kv, nbytes):
        return 5.0 + nbytes / 1e12 * 1e6 / (0.4 + 0.05 * (batch.bit_length() + kv.bit_length()) / 2)

    points = decode_grid(time_us)
    surface = OpInterpolator(tuple(points), memory_roofline)
    for p in points:
        assert surface.time_s("attention", "bf16", p.flops, p.bytes, 5e-6, p.batch, p.kv_len) == pytest.approx(
            p.time_us * 1e-6)
    # between grid points: log efficiency is the mean of the four corners (geometric middle of both axes)
    def eff(p):
        return (p.bytes / 1e12) / (p.time_us * 1e-6 - 5e-6)

    corners = [p for p in points if p.batch in (1, 8) and p.kv_len in (1024, 4096)]
    mid = 1.0
    for p in corners:
        mid *= eff(p) ** 0.25
    b, kv = 8**0.5, 2048.0
    nbytes = b * (kv * 4096 + 32 * 256 * 2)
    got = surface.time_s("attention", "bf16", 0.0, nbytes, 5e-6, b, kv)
    assert got == pytest.approx(5e-6 + nbytes / 1e12 / mid)
    # beyond the grid: the edge's efficiency
    far = 64 * (65536 * 4096 + 32 * 256 * 2)
    edge = next(p for p in points if p.batch == 64 and p.kv_len == 16384)
    assert surface.time_s("attention", "bf16", 0.0, far, 5e-6, 64, 65536) == pytest.approx(5e-6 + far / 1e12 / eff(edge))


def test_decode_attention_surface_is_monotone_in_batch_and_kv_length():
    def noisy(batch, kv, nbytes):  # one point faster than its smaller neighbour
        return 5.0 + nbytes / 1e12 * 1e6 / 0.8 * (0.7 if (batch, kv) == (8, 4096) else 1.0)

    surface = OpInterpolator(tuple(decode_grid(noisy)), memory_roofline)
    batches, lengths = [1, 2, 3, 5, 8, 13, 21, 40, 64, 100], [512, 1024, 2000, 4096, 6000, 16384, 30000]

    def time(b, kv):
        return surface.time_s("attention", "bf16", 0.0, b * (kv * 4096 + 32 * 256 * 2), 5e-6, b, kv)

    for b in batches:
        times = [time(b, kv) for kv in lengths]
        assert all(y >= x for x, y in zip(times, times[1:])), b
    for kv in lengths:
        times = [time(b, kv) for b in batches]
        assert all(y >= x for x, y in zip(times, times[1:])), kv


def test_the_calculator_reads_decode_attention_from_the_surface(tmp_path):
    cfg = model_config("qwen3_8b")
    h100 = hardware("h100", efficiency_table=None)
    entries = []
    for batch, kv in itertools.product((1, 16), (1024, 8192)):
        work = predict_op(cfg, h100, {"mode": "decode", "batch": batch, "context_len": kv}, "attention")
        entries.append({"op": "attention", "dtype": "bf16", "flops": work["flops"], "bytes": work["bytes"],
                        "time_us": 10.0 + batch * kv / 1000, "batch": batch, "kv_len": kv})
    path = tmp_path / "t.json"
    path.write_text(__import__("json").dumps({"stack": "transformers", "op_measurements": entries}))
    assert load_table(path).op_measurements[0].batch == 1
    calibrated = hardware("h100", efficiency_table=str(path))
    got = predict_op(cfg, calibrated, {"mode": "decode", "batch": 16, "context_len": 1024}, "attention")
    assert got["time_s"] == pytest.approx((10.0 + 16 * 1024 / 1000) * 1e-6)
    # tp=2 halves the KV width per device: still served by the (only) surface, at its own roofline
    split = predict_op(cfg, calibrated, {"mode": "decode", "batch": 16, "context_len": 1024}, "attention", {"tp": 2})
    assert split["time_s"] < got["time_s"]
