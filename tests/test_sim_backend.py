"""The sim backend from the command line, for real: task=calibrate on this CPU, the sim_sweep
recipe, and a single invalid layout."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from framework.backends.sim.adapter import SimAdapter
from framework.backends.sim.trainers import simulate_job
from framework.core.parallel import ParallelConfig
from framework.core.errors import ConfigError
from sims import simulate
from sims.calibration.table import load_table
from sims.workload import layout_from_parallel
from tests.conftest import REPO_ROOT, compose_config, run_cli

TINY_CALIBRATION = [
    "task=calibrate", "hardware=cpu", "model=tiny_qwen3", "calibrate.dtype=float32", "calibrate.prefill=[[1,16],[2,32]]",
    "calibrate.decode=[[2,32]]", "calibrate.warmup=0", "calibrate.repeats=2", "calibrate.copy_mb=1",
]


def config(name: str) -> dict:
    return yaml.safe_load((REPO_ROOT / f"conf/{name}.yaml").read_text())


def test_calibrate_on_this_cpu_writes_a_table_that_changes_predictions(tmp_path):
    pytest.importorskip("torch")
    table_path = tmp_path / "tables" / "cpu.json"
    proc = run_cli([*TINY_CALIBRATION, f"calibrate.output={table_path}", f"hydra.run.dir={tmp_path}/run"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"]["table"] == str(table_path)
    assert summary["metrics"]["launch_floor_us"] > 0 and summary["metrics"]["copy_tb_s"] > 0
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(logged) == summary["metrics"]["measurements"]  # one line per timed kernel
    assert {"q_proj", "attention", "rotary", "lm_head", "copy", "launch"} <= {row["benchmark"] for row in logged}

    table = load_table(table_path)
    assert table.gemm_measurements and table.op_measurements and "qk_norm" in table.ops
    cpu, model = config("hardware/cpu")["hardware"], config("model/tiny_qwen3")["hf_config"]
    workload = {"mode": "prefill", "batch": 2, "seq_len": 48, "dtype": "fp32"}
    default = simulate(model, cpu, {}, workload)
    calibrated = simulate(model, {**cpu, "efficiency_table": str(table_path)}, {}, workload)
    assert calibrated.status == "ok" and calibrated.latency_s != default.latency_s


def test_calibrate_rejects_unknown_benchmarks_in_one_line(tmp_path):
    proc = run_cli([*TINY_CALIBRATION, "calibrate.benchmarks=[gemm,conv]", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: calibrate.benchmarks: ['conv']; valid: gemm, moe, router, attention, norm, elementwise, embedding, "
        "copy, launch"
    ]


def test_calibrate_on_cuda_without_a_cuda_device_is_bad_input(tmp_path):
    """calibrate.device=cuda, or a gpu hardware file, on a machine without CUDA was exit 1 (a BackendError), and
    device=cuda said `use hardware=cpu` where hardware=cpu was given."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = run_cli([*TINY_CALIBRATION, "calibrate.device=cuda", f"hydra.run.dir={tmp_path}/a"])
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
        "error: calibrate.device: cuda, and this machine has no CUDA device; valid: cpu, or auto (cuda for a gpu "
        "hardware file, else cpu)")
    proc = run_cli([*TINY_CALIBRATION, "hardware=h100", f"hydra.run.dir={tmp_path}/b"])
    assert proc.returncode == 2 and "calibrate on hardware=h100 needs a CUDA device" in proc.stderr


def test_sim_sweep_recipe_rows_plot_and_invalid_layouts(tmp_path):
    # tp=3 cannot split the node's 8 devices: those 4 jobs are invalid rows, not failed jobs
    proc = run_cli(["-m", "recipe=sim_sweep", "parallel.tp=1,2,3,8", f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    with (tmp_path / "sweep_summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 16
    assert (tmp_path / "sweep_plot.png").stat().st_size > 10_000
    invalid = [r for r in rows if r["status"] == "invalid"]
    assert sorted(r["parallel.tp"] for r in invalid) == ["3"] * 4
    assert all("8 devices do not split into the fixed axes' product 3" in r["error"] for r in invalid)
    assert all(r["status"] == "ok" and float(r["tokens_per_s_per_device"]) > 0 for r in rows if r["parallel.tp"] != "3")


def test_a_sweeping_recipe_without_m_runs_only_with_every_swept_key_given(tmp_path):
    """`recipe=sim_sweep` without -m ran one job (tp=1, ep=1) of the 16, exit 0, no word; every swept key given is
    one run of that layout (the refusal's line: docs/reliability.md table B)."""
    proc = run_cli(["recipe=sim_sweep", "parallel.ep=4", f"hydra.run.dir={tmp_path}/refused"])
    assert proc.returncode == 2 and "recipe=sim_sweep sweeps parallel.tp (hydra.sweeper.params)" in proc.stderr
    assert not (tmp_path / "refused" / "summary.json").exists()
    proc = run_cli(["recipe=sim_sweep", "parallel.tp=2", "parallel.ep=4", f"hydra.run.dir={tmp_path}/one"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load((tmp_path / "one" / "config.yaml").read_text())
    assert (config["parallel"]["tp"], config["parallel"]["ep"]) == (2, 4)


def test_sim_sweep_recipe_fills_the_node_with_valid_layouts():
    job = SimAdapter().convert_config(compose_config(["recipe=sim_sweep"]))
    assert job.parallel.as_dict() == ParallelConfig(dp=-1, fsdp=1, tp=1, pp=1, ep=1, cp=1).as_dict()
    for tp in (1, 2, 4, 8):
        for ep in (1, 2, 4, 8):
            job.parallel.tp, job.parallel.ep = tp, ep
            summary, _ = simulate_job(job)
            assert summary["status"] == "ok", (tp, ep, summary["reason"])
            assert summary["layout_tp"] * summary["layout_dp"] == summary["devices"] == 8


def test_batch_is_per_data_parallel_replica():
    job = SimAdapter().convert_config(compose_config(["recipe=sim_sweep", "parallel.tp=2"]))
    summary, _ = simulate_job(job)
    one_replica, _ = simulate_job(SimAdapter().convert_config(compose_config(
        ["recipe=sim_sweep", "parallel.tp=2", "parallel.dp=1"])))
    assert summary["layout_dp"] == 4 and one_replica["layout_dp"] == 1
    # each replica decodes its own 64 sequences: per-device throughput stays, the step time too
    assert summary["latency_s"] == pytest.approx(one_replica["latency_s"], rel=0.05)
    assert job.task.workload(replicas=4, zero=False)["batch"] == 4 * 64


def test_minus_one_takes_the_remaining_devices():
    axes = {"dp": -1, "fsdp": 1, "tp": 2, "pp": 2, "ep": 1, "cp": 1}
    assert layout_from_parallel(axes, devices=16) == ({"tp": 2, "dp": 4, "ep": 1, "pp": 2}, False)
    assert layout_from_parallel({**axes, "dp": 1, "fsdp": -1}, devices=16)[1] is True  # fsdp shards the optimizer
    assert layout_from_parallel({**axes, "dp": 1, "tp": 32}, devices=16)[0]["tp"] == 32  # no -1: sims reports it
    with pytest.raises(ConfigError, match=r"parallel.dp: -2 is not valid"):
        layout_from_parallel({**axes, "dp": -2}, devices=16)
    with pytest.raises(ConfigError, match=r"parallel.cp: 2; the simulator does not model context parallelism"):
        layout_from_parallel({**axes, "cp": 2}, devices=16)


@pytest.mark.parametrize("overrides, reason", [
    (["sim.mode=train", "sim.batch=6", "sim.microbatches=4"],
     "sim.batch=6 with sim.microbatches=4; valid: a multiple of 4 (each replica runs its rows as that many micro-batches)"),
    (["sim.batch=4", "sim.seq_len=1024", "sim.shared_prefix=8"],
     "sim.batch=4 with sim.shared_prefix=8; valid: a multiple of 8 (each replica holds whole groups of rows sharing a "
     "prompt)"),
    (["sim.context_len=32769"],  # the model's positions, named as the sim key typed (the simulator's: workload.*)
     "sim.context_len=32769 is past the model's 32768 positions (max_position_embeddings); valid: at most 32768"),
])
def test_a_replicas_rows_that_do_not_split_are_an_invalid_row_naming_the_sim_keys(overrides, reason):
    """Over 8 replicas the simulator's own reason would name the whole batch (sim.batch x 8), not the key typed."""
    job = SimAdapter().convert_config(compose_config(["task=sim", "backend=sim", "model=qwen2_5_0_5b_instruct",
                                                      "hardware=h200", "parallel.fsdp=-1", *overrides]))
    assert simulate_job(job)[0] == {"status": "invalid", "reason": reason, "fits": None}


def test_a_single_invalid_layout_exits_2_with_one_line(tmp_path):
    proc = run_cli(["task=sim", "model=qwen3_30b_a3b", "hardware=h100", "parallel.fsdp=1", "parallel.tp=3",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: tp=3 does not divide num_attention_heads=32"]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "invalid"


def test_a_local_model_folder_is_simulated_from_its_own_config_json(tmp_path):
    """model.path: the folder's config.json is the architecture simulated (it was the model group's hf_config,
    whatever the folder held)."""
    qwen3_8b = yaml.safe_load((REPO_ROOT / "conf/model/qwen3_8b.yaml").read_text())["hf_config"]
    (tmp_path / "config.json").write_text(json.dumps(qwen3_8b))
    group, folder = (simulate_job(SimAdapter().convert_config(compose_config(
        ["task=sim", "model=qwen2_5_0_5b_instruct", *extra])))[0] for extra in ([], [f"model.path={tmp_path}"]))
    assert folder["params_total"] > 10 * group["params_total"]  # Qwen3-8B's parameters, not Qwen2.5-0.5B's
    direct = simulate(qwen3_8b, config("hardware/h100")["hardware"], {"tp": 1}, {"mode": "decode", "batch": 1,
                                                                            "context_len": 16})
    assert folder["params_total"] == direct.summary()["params_total"]
