import json

import pytest
from sims_helpers import hardware, model_config

from framework.core.errors import ConfigError
from sims import simulate
from sims.calibration.fit import fit_table
from sims.calibration.table import DEFAULT_OP_CLASSES, ClassEfficiency, EfficiencyTable, load_table, save_table

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
    default = simulate(cfg, hardware("h100"), {}, prefill)
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
        {"collective": "all_reduce", "group": 8, "bytes": b, "time_us": (2 * 7 / 8 * b / (450e9 * 0.8) + 12e-6) * 1e6}
        for b in (1e6, 1e8, 1e9)
    ]
    table = fit_table(kernels + links, hardware("h100"))
    fitted = table.op_classes["attention"]
    assert fitted.floor_us == pytest.approx(5.0, rel=1e-3)
    assert fitted.compute == pytest.approx(0.6, rel=1e-3)
    assert fitted.memory == pytest.approx(0.7, rel=1e-3)
    assert table.op_classes["gemm"] == DEFAULT_OP_CLASSES["gemm"]  # not measured: default kept
    assert table.links["intra_node"].bandwidth == pytest.approx(0.8, rel=1e-6)
    assert table.links["intra_node"].latency_us == pytest.approx(12.0, rel=1e-6)
    assert EfficiencyTable.from_dict(table.to_dict()) == table


def test_microbenchmark_on_this_cpu_produces_a_usable_table(tmp_path):
    """The real measure -> fit -> simulate path with torch on the CPU (values depend on the machine;
    only the structure is checked)."""
    pytest.importorskip("torch")
    from sims.calibration.microbench import run_microbench

    measurements = run_microbench(device="cpu", dtype="fp32", quick=True)
    assert {m["op_class"] for m in measurements} == {"gemm", "elementwise", "norm", "embedding", "attention"}
    assert all(m["time_us"] > 0 for m in measurements)
    cpu = hardware("cpu")
    table = fit_table(measurements, cpu)
    assert len(table.gemm_measurements) == len([m for m in measurements if m["op_class"] == "gemm"])
    save_table(table, tmp_path / "cpu.json")
    result = simulate(
        model_config("qwen2_5_0_5b_instruct"),
        {**cpu, "efficiency_table": str(tmp_path / "cpu.json")},
        {},
        {"mode": "decode", "batch": 1, "context_len": 128, "dtype": "fp32"},
    )
    assert result.status == "ok" and result.latency_s > 0
