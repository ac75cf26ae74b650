"""The shipped tables are exactly what their saved measurements refit to (sims/calibration/tables/refit.yaml),
the hardware files point each software stack at its own table, and saved accuracy runs re-predict against them."""

import json
import subprocess
import sys

import pytest
import yaml
from sims_helpers import REPO, hardware, model_config

from sims import simulate
from sims.benchmarks.repredict import repredict, table_measurements
from sims.calibration import refit as refit_module
from sims.calibration.refit import RefitInputError, entry_measurements, read_measurements
from tests.conftest import run_cli

RESULTS = REPO / "sims/benchmarks/results"
DECODE = {"mode": "decode", "batch": 8, "context_len": 2048}


def test_shipped_tables_refit_exactly_from_their_measurements(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sims.calibration.refit", "--shipped", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = yaml.safe_load((REPO / "sims/calibration/tables/refit.yaml").read_text())
    assert {"h100.json", "h100_torch_fused.json", "h200.json", "h200_torch_fused.json"} <= set(listed)
    for name in listed:
        shipped = json.loads((REPO / "sims/calibration/tables" / name).read_text())
        assert json.loads((tmp_path / name).read_text()) == shipped, name
        assert shipped["stack"] == listed[name]["stack"], name


def test_shipped_tables_carry_fp8_gemms_and_only_graph_timed_collectives():
    """The first 4 x H200 run's collectives were timed as eager calls (host-bound latencies that made the 4-GPU layouts
    20% off) and are left out; the graph-replayed 2 and 4 x H200 ones are in the torch_fused and xla tables (they made
    the torch_fused 2-GPU cases and the xla stack's multi-GPU GRPO steps better, the transformers layouts worse) and
    not in the transformers ones; likewise the graph-replayed 2 x H100 ones. The xla table's kernels are the JAX
    backend's own: bf16 (the maxtext backend runs no fp8)."""
    listed = yaml.safe_load((REPO / "sims/calibration/tables/refit.yaml").read_text())
    for name, spec in listed.items():
        table = json.loads((REPO / "sims/calibration/tables" / name).read_text())
        dtypes = {"bf16"} if spec["stack"] == "xla" else {"bf16", "fp8"}
        assert {g["dtype"] for g in table["gemm_measurements"]} == dtypes, name
        collectives = [m for entry in spec["files"] for m in entry_measurements(entry) if "collective" in m]
        assert all(m.get("timing") == "cuda_graph" for m in collectives), name
        assert bool(table.get("collectives")) == (spec["stack"] in ("torch_fused", "xla")), name
    kinds = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
    for name, groups in (("h100_torch_fused.json", (2,)), ("h200_torch_fused.json", (2, 4)), ("h100_xla.json", (2,)),
                         ("h200_xla.json", (2, 4))):
        fitted = json.loads((REPO / "sims/calibration/tables" / name).read_text())["collectives"]
        assert {(c["collective"], c["group"]) for c in fitted} == {(k, g) for k in kinds for g in groups}, name


@pytest.mark.parametrize("card", ["h100", "h200"])
@pytest.mark.parametrize("stack", ["transformers", "torch_fused", "xla"])
def test_each_card_maps_each_stack_to_a_table_of_that_stack(card, stack):
    hw = hardware(card)
    path = hw["efficiency_table"][stack]
    result = simulate(model_config("qwen3_8b"), hw, {"tp": 2}, DECODE, stack=stack)
    if path is None:
        assert result.summary()["efficiency_table"] == "built-in defaults"
        return
    table = json.loads((REPO / path).read_text())
    assert table["stack"] == stack
    assert result.summary()["efficiency_table"] == table["source"]
    assert result.summary()["warning"] == ""


def test_a_stack_mapping_is_checked_before_the_run_and_runs(tmp_path):
    sim = ["backend=sim", "task=sim", "model=qwen3_8b", "hardware=h200", f"hydra.run.dir={tmp_path}/run"]
    bad = run_cli([*sim, "hardware.efficiency_table.torch_fused=/no/table.json"])
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("error: hardware.efficiency_table.torch_fused: efficiency table '/no/table.json' "
                                  "does not exist")
    good = run_cli([*sim, "sim.stack=torch_fused"])
    assert good.returncode == 0, good.stderr[-2000:]
    metrics = json.loads((tmp_path / "run/summary.json").read_text())["metrics"]
    assert metrics["stack"] == "torch_fused" and "torch_fused" in metrics["efficiency_table"]


def test_repredict_uses_the_stack_table_and_its_measurements_for_held_out():
    h200 = hardware("h200")
    saved = json.loads((RESULTS / "h200x4_2026-11-26/accuracy_transformers.json").read_text())
    report = repredict(saved, h200)
    assert report["table"] == h200["efficiency_table"]["transformers"]
    timed = {(m.get("op"), m.get("flops"), m.get("bytes")) for m in table_measurements(report["table"])}
    for case in report["cases"]:
        if "work" in case:  # single kernels: held out unless the table's files timed that exact work
            assert case["held_out"] == ((case["op"], case["work"]["flops"], case["work"]["bytes"]) not in timed)
        assert case["error_calibrated"] == pytest.approx(case["predicted_calibrated_us"] / case["time_us"] - 1)
    assert [c["held_out"] for c in report["cases"]].count(False) == 1
    assert report["summary"]["calibrated"]["all"]["cases"] == 27

    fused = repredict(json.loads((RESULTS / "h200x4_2026-11-26/accuracy_tp1.json").read_text()), h200)
    assert fused["table"] == h200["efficiency_table"]["torch_fused"]
    case = fused["cases"][0]
    expected = simulate(fused["model"], h200, {"tp": 1}, {**case["workload"], "dtype": "bf16"}, stack="torch_fused")
    assert case["predicted_calibrated_us"] == pytest.approx(expected.latency_s * 1e6)


@pytest.mark.parametrize("content, expected", [
    (None, "cannot read it (No such file or directory)"), ("garbage", "not JSON (Expecting value, line 1)"),
    ("{}", "not a measurement file; valid: a JSON list"), ("[1, 2]", "not a measurement file; valid: a JSON list"),
    ("[]", "no measurements; a table fit from none would be empty"),
    ('[{"op": "gemm"}]', "none of the 1 measurements has an op_class (a kernel timing) or a collective"),
    ('[{"op_class": "gemm", "m": 1}]', "a measurement has no 'flops'"),
    ('[{"op_class": "warp"}]', "measurements name unknown op_class warp; valid: gemm")])
def test_a_bad_measurement_file_is_one_line_naming_it(content, expected, tmp_path):
    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    result = subprocess.run([sys.executable, "-m", "sims.calibration.refit", str(path), "--hardware",
                             str(REPO / "conf/hardware/h100.yaml"), "--stack", "xla", "--source", "x", "--out",
                             str(tmp_path / "t.json")], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"refit.py: error: {path}: {expected}")
    assert "Traceback" not in result.stderr and not (tmp_path / "t.json").exists()


def test_a_hardware_path_that_is_no_file_is_one_line(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"op": "gemm"}]))
    result = subprocess.run([sys.executable, "-m", "sims.calibration.refit", str(path), "--hardware", "h100",
                             "--stack", "xla", "--source", "x", "--out", str(tmp_path / "t.json")],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert "refit.py: error: --hardware: h100 is not a file; valid: a conf/hardware/*.yaml path" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_refit_entry_without_ops_leaves_the_ops_a_later_file_re_timed():
    # h200_xla.json's head: session 13's chunk records (the pre-session-16 head) give way to session 24's re-timing
    spec = yaml.safe_load((REPO / "sims/calibration/tables/refit.yaml").read_text())["h200_xla.json"]
    entry = next(e for e in spec["files"] if isinstance(e, dict))
    whole = read_measurements([str(REPO / entry["path"])])
    kept = entry_measurements(entry)
    dropped = [m for m in whole if m not in kept]
    assert {m["op"] for m in dropped} == set(entry["without_ops"]) == {"lm_head", "cross_entropy"}
    assert not {m.get("op") for m in kept} & {"lm_head", "cross_entropy"} and len(kept) == len(whole) - len(dropped)


@pytest.mark.parametrize(("entry", "says"), [
    ({"path": "P", "without_op": ["lm_head"]}, "valid: a path, or {path, without_ops: [op, ...]}"),
    ({"without_ops": ["lm_head"]}, "valid: a path, or {path, without_ops: [op, ...]}"),
    ({"path": "P", "without_ops": ["lm_heads"]}, "P: without_ops 'lm_heads' is no op of the file"),
    # were: a string read a letter at a time ('l' is no op), TypeErrors for null, a nested list, a path of null / 3
    ({"path": "P", "without_ops": "lm_head"}, "P: without_ops: 'lm_head'; valid: a non-empty list of op names (or "
     "the path alone)"),
    ({"path": "P", "without_ops": None}, "P: without_ops: None; valid: a non-empty list of op names"),
    ({"path": "P", "without_ops": [["lm_head"]]}, "P: without_ops: [['lm_head']]; valid: a non-empty list"),
    ({"path": "P", "without_ops": []}, "P: without_ops: []; valid: a non-empty list"),  # drops nothing
    ({"path": None, "without_ops": ["lm_head"]}, "valid: a path, or {path, without_ops: [op, ...]}"),
    ({"path": 3, "without_ops": ["lm_head"]}, "valid: a path, or {path, without_ops: [op, ...]}"),
    (["P"], "file entry ['P']: valid: a path, or {path, without_ops: [op, ...]}"),
    ("", "file entry '': valid: a path"),
])
def test_a_refit_entry_that_would_drop_nothing_is_refused(entry, says):
    # a misspelt key or op kept session 13's head records in the fit, silently
    path = "sims/benchmarks/results/h200_2026-11-27_s13_xlabwd/train_microbench.json"
    if isinstance(entry, dict):
        entry = {k: path if v == "P" else v for k, v in entry.items()}
    with pytest.raises(RefitInputError) as refused:
        entry_measurements(entry)
    assert says.replace("P:", f"{path}:") in str(refused.value)


DROP = object()


@pytest.mark.parametrize(("h100", "says"), [
    (None, "refit.yaml: valid: a mapping of table file names to {hardware, stack, source, files}"),  # a list of them
    ({"stack": DROP}, "refit.yaml: h100.json: {"),  # was KeyError: 'stack'
    ({"files": "a.json"}, "h100.json: files: 'a.json'; valid: {hardware, stack, source, files: [path or "),
    ({"files": []}, "h100.json: files: []; valid: "),  # an empty table
    ({"hardware": "conf/hardware/nope.yaml"},
     "h100.json: hardware: 'conf/hardware/nope.yaml' is no file; valid: a conf/hardware/*.yaml path"),
    ({"stack": "jax"}, "h100.json: stack: 'jax'; valid: one of ['megatron_local', 'torch_fused', "),
])
def test_a_refit_yaml_of_another_shape_is_one_line_naming_the_table(h100, says, tmp_path, monkeypatch):
    specs = yaml.safe_load((REPO / "sims/calibration/tables/refit.yaml").read_text())
    if h100 is None:
        specs = list(specs)
    else:
        specs["h100.json"] = {k: v for k, v in (specs["h100.json"] | h100).items() if v is not DROP}
    (tmp_path / "refit.yaml").write_text(yaml.safe_dump(specs))
    monkeypatch.setattr(refit_module, "SHIPPED", tmp_path / "refit.yaml")
    with pytest.raises(RefitInputError) as refused:
        refit_module.refit_shipped(tmp_path / "out")
    assert says in str(refused.value) and not list((tmp_path / "out").iterdir())
