"""Prefill attention as a batch x prompt-length surface: many short prompts are not one long one."""

import itertools
import json
from dataclasses import replace

import pytest
from sims_helpers import REPO, hardware, model_config

from sims import predict_op
from sims.calibration.fit import fit_table
from sims.calibration.interpolate import AttentionSurface, OpInterpolator
from sims.calibration.refit import read_measurements
from sims.calibration.table import EfficiencyTable, OpMeasurement, load_table, save_table
from framework.core.errors import ConfigError
from sims.interpolators import op_interpolator
from sims.hardware import hardware_spec

WIDTH = 20480  # q, output and K/V bytes per prompt token (32 heads x 128 and 8 kv heads, bf16)
FLOOR = 5e-6
S9_HF = "sims/benchmarks/results/h100_2026-11-26_s9/hf/microbench.json"  # no prefill grid


def compute_roofline(op, dtype, flops, nbytes):
    return flops / 1e15, "compute"


def true_time_s(b, s):
    """Efficiency rises with prompt length and falls with batch at equal FLOPs (log-linear in both)."""
    return FLOOR + 2.0 * b * s**2 * 4096 / 1e15 / (0.5 * (s / 8192) ** 0.25 * b**-0.1)


def prefill_point(b, s, on_grid=False):
    """A synthetic prefill measurement (no causal halving, to keep equal-FLOPs pairs exact)."""
    flops, nbytes = 2.0 * b * s**2 * 4096, b * s * WIDTH
    point = {"batch": b, "seq_len": s} if on_grid else {}
    return OpMeasurement("attention", "bf16", flops, nbytes, true_time_s(b, s) * 1e6, **point)


def grid():
    return [prefill_point(b, s, on_grid=True) for b, s in itertools.product((1, 4, 16), (128, 512, 2048, 8192))]


def test_the_surface_tells_apart_what_the_curve_cannot():
    # 2 x 1024 and 8 x 512 have the same FLOPs, so the same roofline time: a curve over it gives both one time
    two, eight = prefill_point(2, 1024), prefill_point(8, 512)
    assert compute_roofline("attention", "bf16", two.flops, two.bytes) == compute_roofline(
        "attention", "bf16", eight.flops, eight.bytes)
    assert true_time_s(8, 512) > 1.1 * true_time_s(2, 1024)
    surface = OpInterpolator(tuple(grid()), compute_roofline)
    curve = OpInterpolator(tuple(replace(m, batch=None, seq_len=None) for m in grid()), compute_roofline)
    for b, s in ((2, 1024), (8, 512), (3, 300), (16, 2048)):
        m = prefill_point(b, s)
        assert surface.time_s("attention", "bf16", m.flops, m.bytes, FLOOR, b, seq_len=s) == pytest.approx(
            true_time_s(b, s), rel=1e-9)
    assert curve.time_s("attention", "bf16", two.flops, two.bytes, FLOOR, 2, seq_len=1024) == curve.time_s(
        "attention", "bf16", eight.flops, eight.bytes, FLOOR, 8, seq_len=512)


def test_prefill_and_decode_surfaces_are_kept_apart():
    decode = [OpMeasurement("attention", "bf16", 1e6 * b * kv, 4096.0 * b * kv, 10.0 * b, batch=b, kv_len=kv)
              for b, kv in itertools.product((1, 8), (1024, 4096))]
    surfaces = AttentionSurface.build_all(tuple(grid() + decode), compute_roofline)
    assert sorted(mode for _, _, mode, _ in surfaces) == ["decode", "prefill"]
    interpolator = OpInterpolator(tuple(grid() + decode), compute_roofline)
    m = prefill_point(4, 512)
    assert interpolator.time_s("attention", "bf16", m.flops, m.bytes, FLOOR, 4, seq_len=512) == pytest.approx(
        true_time_s(4, 512))
    assert interpolator.time_s("attention", "bf16", 8e6 * 1024, 4096.0 * 8 * 1024, FLOOR, 8, 1024) == pytest.approx(80e-6)


def test_without_a_two_by_two_grid_prefill_follows_the_curve():
    # the classic workload points (one batch per length) are no grid: the curve serves them
    points = tuple(prefill_point(b, s, on_grid=True) for b, s in ((1, 128), (1, 1024), (4, 2048), (2, 8192)))
    assert AttentionSurface.build_all(points, compute_roofline) == {}
    with_point = OpInterpolator(points, compute_roofline)
    m = prefill_point(8, 512)
    args = ("attention", "bf16", m.flops, m.bytes, FLOOR)
    assert with_point.time_s(*args, 8, seq_len=512) == with_point.time_s(*args)


def measurement_dicts(cfg, hw, shapes):
    out = []
    for b, s in shapes:
        work = predict_op(cfg, hw, {"mode": "prefill", "batch": b, "seq_len": s}, "attention")
        out.append({"op": "attention", "op_class": "attention", "dtype": "bf16", "mode": "prefill", "batch": b,
                    "seq_len": s, "kv_len": s, "flops": work["flops"], "bytes": work["bytes"],
                    "time_us": true_time_s(b, s) * 1e6})
    return out


def test_fit_keeps_prefill_points_only_on_a_grid_and_the_calculator_reads_the_surface(tmp_path):
    cfg, h100 = model_config("qwen3_8b"), hardware("h100", efficiency_table=None)
    workloads = measurement_dicts(cfg, h100, ((1, 128), (1, 1024), (4, 2048), (2, 8192)))
    assert all(m.seq_len is None and m.batch is None for m in fit_table(workloads, h100).op_measurements)
    gridded = workloads + measurement_dicts(cfg, h100, itertools.product((1, 4, 16), (256, 768, 2048, 6144)))
    table = fit_table(gridded, h100)
    on_grid = {(m.batch, m.seq_len) for m in table.op_measurements if m.seq_len}
    assert on_grid == {(m["batch"], m["seq_len"]) for m in gridded}  # the off-grid workloads too (medians)
    assert EfficiencyTable.from_dict(json.loads(json.dumps(table.to_dict()))) == table
    save_table(table, tmp_path / "t.json")
    calibrated = hardware("h100", efficiency_table=str(tmp_path / "t.json"))
    exact = predict_op(cfg, calibrated, {"mode": "prefill", "batch": 4, "seq_len": 768}, "attention")["time_s"]
    assert exact == pytest.approx(true_time_s(4, 768))
    between = predict_op(cfg, calibrated, {"mode": "prefill", "batch": 8, "seq_len": 512}, "attention")
    assert true_time_s(4, 256) < between["time_s"] < true_time_s(16, 768)
    interpolator = op_interpolator(hardware_spec(calibrated))
    args = ("attention", "bf16", between["flops"], between["bytes"], table.for_op("attention", "attention").floor_us * 1e-6)
    assert between["time_s"] == interpolator.time_s(*args, 8, seq_len=512)  # the surface, not the curve:
    assert abs(between["time_s"] / interpolator._interpolate(*args) - 1) > 0.01
    # a training step's forward stays on the curve (where its own training-shape timings live): the compute-bound
    # one, though Qwen3-8B's 8 x 512 tokens (GQA 4) sit below the H100's ridge, where the roofline reads them as
    # memory-bound and the decode steps' curve would serve them (Llama-3.2-1B's update: 22 ms of attention read off
    # it where call K's profile shows 64 ms, session 23)
    train = predict_op(cfg, calibrated, {"mode": "train", "batch": 8, "seq_len": 512}, "attention")
    assert interpolator._roofline_s(*args[:4])[1] == "memory"
    assert train["time_s"] == max(interpolator._interpolate(*args, curve="compute"), args[-1])
    assert train["time_s"] != max(interpolator._interpolate(*args), args[-1])


def test_a_table_without_a_prefill_grid_predicts_prefill_from_its_curve_as_before(tmp_path):
    h100 = hardware("h100", efficiency_table=None)
    table = fit_table(read_measurements([str(REPO / S9_HF)]), h100)
    assert not any(m.seq_len for m in table.op_measurements)
    save_table(table, tmp_path / "s9.json")
    calibrated = hardware("h100", efficiency_table=str(tmp_path / "s9.json"))
    interpolator = op_interpolator(hardware_spec(calibrated))
    floor_s = table.for_op("attention", "attention").floor_us * 1e-6
    for b, s in ((8, 512), (1, 4096), (2, 3072), (16, 256)):
        got = predict_op(model_config("qwen3_8b"), calibrated, {"mode": "prefill", "batch": b, "seq_len": s}, "attention")
        curve = interpolator._interpolate("attention", "bf16", got["flops"], got["bytes"], floor_s)
        assert got["time_s"] == max(curve, floor_s)


def test_a_table_rejects_a_bad_prefill_point(tmp_path):
    entry = {"op": "attention", "dtype": "bf16", "flops": 1e9, "bytes": 1e6, "time_us": 9.0, "batch": 2, "seq_len": 0}
    (tmp_path / "t.json").write_text(json.dumps({"op_measurements": [entry]}))
    with pytest.raises(ConfigError, match=r"op_measurements\[0\]: seq_len is 0; expected an integer >= 1"):
        load_table(tmp_path / "t.json")


@pytest.mark.parametrize("tiny", [False, True])
def test_the_prefill_grid_stays_off_the_accuracy_benchmarks_held_out_prefills(tiny):
    from sims.benchmarks import accuracy, torch_fused
    from sims.calibration import microbench

    s = accuracy.suite(tiny)
    grid = microbench.QUICK_PREFILL_GRID if tiny else microbench.PREFILL_GRID
    cases = [w for _, w in s["attention"]] + [w for _, w in s["whole"]]
    cases += list(torch_fused.TINY_CASES + torch_fused.TINY_MOE_CASES if tiny else torch_fused.CASES + torch_fused.MOE_CASES)
    held_out = {(w["batch"], w["seq_len"]) for w in cases if w["mode"] == "prefill"}
    assert held_out and not held_out & set(grid)
    assert len({b for b, _ in grid}) >= 2 and len({n for _, n in grid}) >= 2


def test_a_tensor_parallel_prefill_takes_the_nearest_measured_width():
    # a second model of 4096 bytes per prompt token (head dim 64) runs at half the efficiency
    narrow = [replace(m, bytes=m.bytes * 4096 / WIDTH, time_us=(FLOOR + 2 * (m.time_us * 1e-6 - FLOOR)) * 1e6)
              for m in grid()]
    interpolator = OpInterpolator(tuple(grid() + narrow), compute_roofline)
    m = prefill_point(8, 512)  # at tp=2: half the bytes per token, log2 13.3, nearer the 20480-byte model
    got = interpolator.time_s("attention", "bf16", m.flops, m.bytes / 2, FLOOR, 8, seq_len=512)
    assert got == pytest.approx(true_time_s(8, 512))


def test_a_training_steps_attention_reads_the_points_timed_as_a_training_forward(tmp_path):
    # cuDNN's training forward (keeping the softmax statistics) ran 1.4x a prefill's of the same FLOPs on an H200
    # (Qwen2.5-1.5B at 32 x 512: 95.8 us against 69.2; session 24): the training step reads its own points, a prefill
    # what it read before
    cfg, h100 = model_config("qwen3_8b"), hardware("h100", efficiency_table=None)
    records = []
    for b in (4, 16, 64):
        for mode, slow in (("prefill", 1.0), ("train", 1.4)):
            work = predict_op(cfg, h100, {"mode": mode, "batch": b, "seq_len": 512}, "attention")
            records.append({"op": "attention", "op_class": "attention", "dtype": "bf16", "mode": mode, "batch": b,
                            "seq_len": 512, "kv_len": 512, "flops": work["flops"], "bytes": work["bytes"],
                            "time_us": slow * true_time_s(b, 512) * 1e6})
    table = fit_table(records, h100)
    assert sorted(m.mode or "" for m in table.op_measurements) == ["", "", "", "train", "train", "train"]
    assert EfficiencyTable.from_dict(json.loads(json.dumps(table.to_dict()))) == table
    save_table(table, tmp_path / "t.json")
    calibrated = hardware("h100", efficiency_table=str(tmp_path / "t.json"))
    train = predict_op(cfg, calibrated, {"mode": "train", "batch": 16, "seq_len": 512}, "attention")
    prefill = predict_op(cfg, calibrated, {"mode": "prefill", "batch": 16, "seq_len": 512}, "attention")
    assert train["time_s"] == pytest.approx(1.4 * true_time_s(16, 512))  # its forward alone; the backward elsewhere
    # prefill reads the curves as before the mode existed: the training points in them, as plain points
    plain = fit_table([{k: v for k, v in r.items() if k != "mode"} for r in records], h100)
    save_table(plain, tmp_path / "plain.json")
    before = predict_op(cfg, hardware("h100", efficiency_table=str(tmp_path / "plain.json")),
                        {"mode": "prefill", "batch": 16, "seq_len": 512}, "attention")
    assert prefill["time_s"] == before["time_s"]
    without = fit_table([r for r in records if r["mode"] == "prefill"], h100)  # no training points: the curve
    save_table(without, tmp_path / "p.json")
    assert predict_op(cfg, hardware("h100", efficiency_table=str(tmp_path / "p.json")),
                      {"mode": "train", "batch": 16, "seq_len": 512}, "attention")["time_s"] == pytest.approx(
        true_time_s(16, 512))
    entry = {"op": "attention", "dtype": "bf16", "flops": 1.0, "bytes": 1.0, "time_us": 1.0, "mode": "prefill"}
    with pytest.raises(ConfigError, match="mode"):
        EfficiencyTable.from_dict({**table.to_dict(), "op_measurements": [entry]})
