import json
import re

import pytest
from sims_helpers import hardware, model_config

from framework.core.errors import ConfigError
from sims import predict_op, simulate
from sims.calibration.fit import fit_table
from sims.calibration.interpolate import OpInterpolator
from sims.calibration.table import (
    DEFAULT_OP_CLASSES,
    ClassEfficiency,
    EfficiencyTable,
    OpMeasurement,
    load_table,
    save_table,
)

H100_BF16, H100_HBM = 989.4e12, 3.35e12


def write(tmp_path, record) -> str:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(record))
    return str(path)


def test_partial_table_keeps_defaults_elsewhere(tmp_path):
    table = load_table(write(tmp_path, {"op_classes": {"gemm": {"compute": 0.6}}}))
    assert table.op_classes["gemm"] == ClassEfficiency(0.6, DEFAULT_OP_CLASSES["gemm"].memory, 4.0)
    assert table.op_classes["attention"] == DEFAULT_OP_CLASSES["attention"]


@pytest.mark.parametrize(
    "record, message",
    [
        ({"op_classes": {"conv": {"compute": 0.5}}}, "'conv' is not valid; valid: gemm, moe, attention"),
        ({"op_classes": {"gemm": {"compute": 1.5}}}, "op_classes.gemm.compute is 1.5; expected a fraction in (0, 1]"),
        ({"op_classes": {"gemm": {"speed": 1}}}, "unknown key(s) speed"),
        ({"links": {"intra_node": {"latency_us": -1}}}, "links.intra_node.latency_us is -1"),
        ({"gemm_measurements": [{"m": 1, "n": 2, "k": 3, "dtype": "bf16"}]}, "gemm_measurements[0]: missing time_us"),
        ({"format": "other/2"}, "format is 'other/2'"),
        ({"extra": 1}, "unknown key(s) extra"),
    ],
)
def test_bad_tables_name_the_key(tmp_path, record, message):
    with pytest.raises(ConfigError) as error:
        load_table(write(tmp_path, record))
    assert message in str(error.value) and "table.json" in str(error.value)


def test_unreadable_tables(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_table(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_table(broken)


def test_save_and_load_round_trip(tmp_path):
    table = load_table(
        write(tmp_path, {"gemm_measurements": [{"m": 8, "n": 16, "k": 32, "dtype": "fp8", "time_us": 3}]})
    )
    save_table(table, tmp_path / "again.json")
    assert load_table(tmp_path / "again.json") == table


def test_hardware_table_changes_the_estimate(tmp_path):
    cfg, prefill = model_config("qwen3_8b"), {"mode": "prefill", "batch": 4, "seq_len": 2048}
    slow = write(tmp_path, {"op_classes": {"gemm": {"compute": 0.25}}})
    default = simulate(cfg, hardware("h100", efficiency_table=None), {}, prefill)  # built-in factors
    calibrated = simulate(cfg, hardware("h100", efficiency_table=slow), {}, prefill)
    q_proj = lambda r: next(x for x in r.breakdown_rows() if x["name"] == "q_proj")  # noqa: E731
    assert q_proj(calibrated)["time_s"] - 36 * 4e-6 == pytest.approx(3 * (q_proj(default)["time_s"] - 36 * 4e-6))


def synthetic(op_class, flops, nbytes, compute, memory, floor_us):
    time_s = max(flops / (H100_BF16 * compute), nbytes / (H100_HBM * memory)) + floor_us * 1e-6
    return {"op_class": op_class, "dtype": "bf16", "flops": flops, "bytes": nbytes, "time_us": time_s * 1e6}


def test_fit_recovers_the_efficiencies_that_generated_the_data():
    kernels = [synthetic("attention", 1e3, 1e3, 0.6, 0.7, 5.0)]  # launch-bound: sets the floor
    kernels += [synthetic("attention", f, 1e6, 0.6, 0.7, 5.0) for f in (1e12, 4e12, 1.6e13)]  # compute-bound
    kernels += [synthetic("attention", 1e6, b, 0.6, 0.7, 5.0) for b in (1e9, 4e9)]  # memory-bound
    links = [
        {"collective": "all_reduce", "group": 8, "bytes": b, "time_us": (2 * 7 / 8 * b / 360e9 + 12e-6) * 1e6}
        for b in (1e3, 1e6, 1e8, 1e9)
    ]
    table = fit_table(kernels + links, hardware("h100"))
    fitted = table.op_classes["attention"]
    assert fitted.floor_us == pytest.approx(5.0, rel=1e-3)
    assert fitted.compute == pytest.approx(0.6, rel=1e-3)
    assert fitted.memory == pytest.approx(0.7, rel=1e-3)
    assert table.op_classes["gemm"] == DEFAULT_OP_CLASSES["gemm"]  # not measured: default kept
    (fit,) = table.collectives
    assert (fit.collective, fit.group, fit.link) == ("all_reduce", 8, "intra_node")
    assert fit.bus_gb_s == pytest.approx(360.0, rel=1e-6) and fit.latency_us == pytest.approx(12.0, rel=1e-6)
    assert EfficiencyTable.from_dict(table.to_dict()) == table


def test_class_floor_is_never_above_the_fastest_kernel_of_the_class():
    # Neither kernel is launch-dominated (their rooflines are over 10% of their times), so the
    # default floor (3 us) would stand, yet the faster kernel takes 1.6 us.
    kernels = [synthetic("norm", 0.0, b, 0.6, 0.5, 1.0) for b in (1e6, 2e6)]
    fitted = fit_table(kernels, hardware("h100")).op_classes["norm"]
    assert fitted.floor_us == pytest.approx(min(k["time_us"] for k in kernels))


def test_ops_measured_by_name_get_their_own_entry_and_curve():
    rotary = [dict(synthetic("elementwise", 0.0, b, 0.3, 0.2, 20.0), op="rotary") for b in (1e3, 1e8, 4e8)]
    act = [dict(synthetic("elementwise", 0.0, b, 0.3, 0.7, 3.0), op="mlp_act") for b in (1e3, 1e8, 4e8)]
    table = fit_table(rotary + act, hardware("h100"))
    assert table.ops["rotary"].floor_us == pytest.approx(20.0, rel=1e-3)
    assert table.ops["rotary"].memory == pytest.approx(0.2, rel=1e-3)
    assert table.ops["mlp_act"].memory == pytest.approx(0.7, rel=1e-3)
    assert table.for_op("rotary", "elementwise") == table.ops["rotary"]
    assert table.for_op("qk_norm", "norm") == table.op_classes["norm"]
    assert {m.op for m in table.op_measurements} == {"rotary", "mlp_act"}
    assert EfficiencyTable.from_dict(table.to_dict()) == table


def test_measurements_of_one_op_must_share_a_class():
    mixed = [dict(synthetic(kind, 0, 1e6, 0.3, 0.5, 3), op="x") for kind in ("norm", "elementwise")]
    with pytest.raises(ConfigError, match="op 'x' name several op classes"):
        fit_table(mixed, hardware("h100"))


def roofline(op, dtype, flops, nbytes):
    compute, memory = flops / 1e15, nbytes / 1e12
    return max(compute, memory), "compute" if compute >= memory else "memory"


def test_op_curve_is_exact_at_points_a_power_law_between_and_keeps_efficiency_beyond():
    points = (OpMeasurement("rotary", "bf16", 0.0, 1e6, 12.0), OpMeasurement("rotary", "bf16", 0.0, 1e8, 202.0))
    curve = OpInterpolator(points, roofline)
    floor = 2e-6
    assert curve.time_s("rotary", "bf16", 0.0, 1e6, floor) == pytest.approx(12e-6)
    assert curve.time_s("rotary", "bf16", 0.0, 1e8, floor) == pytest.approx(202e-6)
    # above-floor times 10 us and 200 us: at the geometric middle of the bytes, their geometric mean
    assert curve.time_s("rotary", "bf16", 0.0, 1e7, floor) == pytest.approx(floor + (10e-6 * 200e-6) ** 0.5)
    assert curve.time_s("rotary", "bf16", 0.0, 2e8, floor) == pytest.approx(floor + 400e-6)  # efficiency kept
    assert curve.time_s("rotary", "bf16", 0.0, 1e4, floor) == pytest.approx(floor + 0.1e-6)  # towards the floor
    assert curve.time_s("rotary", "fp32", 0.0, 1e6, floor) is None
    assert curve.time_s("attention", "bf16", 0.0, 1e6, floor) is None


def test_op_curves_keep_compute_and_memory_bound_sizes_apart():
    prefill = OpMeasurement("attention", "bf16", 1e12, 1e6, 2000.0)  # compute-bound: 1 ms at peak
    decode = OpMeasurement("attention", "bf16", 1e6, 1e9, 1250.0)  # memory-bound: 1 ms at peak
    curve = OpInterpolator((prefill, decode), roofline)
    assert curve.time_s("attention", "bf16", 2e12, 1e6, 0.0) == pytest.approx(4000e-6)
    assert curve.time_s("attention", "bf16", 1e6, 2e9, 0.0) == pytest.approx(2500e-6)


def test_the_calculator_follows_a_measured_op_curve(tmp_path):
    cfg, decode = model_config("qwen3_8b"), {"mode": "decode", "batch": 8, "context_len": 1024}
    built_in = hardware("h100", efficiency_table=None)
    work = predict_op(cfg, built_in, decode, "rotary")
    entry = {"op": "rotary", "dtype": "bf16", "flops": work["flops"], "bytes": work["bytes"], "time_us": 33.0}
    calibrated = hardware("h100", efficiency_table=write(tmp_path, {"op_measurements": [entry]}))
    assert predict_op(cfg, calibrated, decode, "rotary")["time_s"] == pytest.approx(33e-6)
    assert predict_op(cfg, calibrated, {**decode, "dtype": "fp8"}, "rotary")["time_s"] == pytest.approx(33e-6)
    assert predict_op(cfg, calibrated, {**decode, "batch": 16}, "rotary")["time_s"] > 33e-6
    assert predict_op(cfg, calibrated, decode, "qk_norm") == predict_op(cfg, built_in, decode, "qk_norm")


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"op": "rotary", "dtype": "bf16", "flops": 0, "bytes": 1}, "op_measurements[0]: missing time_us"),
        ({"op": "rotary", "dtype": "int4", "flops": 0, "bytes": 1, "time_us": 2}, "'int4' is not valid"),
        ({"op": "rotary", "dtype": "bf16", "flops": -1, "bytes": 1, "time_us": 2}, "flops is -1"),
    ],
)
def test_bad_op_measurements_name_the_entry(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_table(write(tmp_path, {"op_measurements": [entry]}))


def test_unknown_op_names_the_valid_ones(h100):
    with pytest.raises(ConfigError, match="op 'q_prj' is not in the qwen3 decode graph; valid: embed_tokens"):
        predict_op(model_config("qwen3_8b"), h100, {"mode": "decode", "context_len": 8}, "q_prj")
