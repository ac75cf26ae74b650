"""End-to-end pretraining runs on a CPU (subprocesses, as a user runs them; all slow).

- the loss falls on the shipped text sample, with every record, checkpoint and the HF export;
- kill -9 right after a checkpoint -> resume -> the same final checkpoint and metrics (conformance);
- tp=2, pp=2 and dp=2 (two gloo ranks under torchrun) train the same losses as one rank, from the same
  pretrained weights: within LOSS_TOLERANCE (float32; reductions split differently over ranks);
- tp=2 x pp=2 (four ranks) trains the same losses and exports the same weights;
- a checkpoint saved at tp=1 resumes at tp=2 (dist_checkpointing reshards at load).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from framework.core.loggers import read_metrics
from tests.conformance import check_kill_resume
from tests.conftest import REPO_ROOT, run_cli

RECIPE = ["recipe=pretrain_megatron_cpu", "progress=false"]
PARITY = [*RECIPE, "pretrain.init_from=pretrained", "pretrain.steps=4", "pretrain.eval.every=0",
          "pretrain.checkpoint.every=0", "pretrain.export_hf=false", "backend.adapter.preflight=false"]
LOSS_TOLERANCE = 1e-4
EXPORT_TOLERANCE = 1e-5  # weights after 4 steps (measured 2e-7)


def _env(cache_dir) -> dict:
    return {"CRUCIBLE_CACHE": str(cache_dir), "OMP_NUM_THREADS": "1"}


def _torchrun(args: list[str], cache_dir, ranks: int = 2) -> subprocess.CompletedProcess:
    env = {**os.environ, **_env(cache_dir)}
    env.pop("HYDRA_FULL_ERROR", None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
               "--master_port", str(29400 + os.getpid() % 500), str(REPO_ROOT / "run.py"), *args]
    return subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)


def _losses(run_dir) -> list[float]:
    return [row["loss"] for row in read_metrics(run_dir / "metrics.jsonl")]


@pytest.mark.slow
def test_loss_falls_and_the_run_dir_holds_records_checkpoints_and_export(tmp_path, cache_dir):
    proc = run_cli([*RECIPE, f"hydra.run.dir={tmp_path}"], env=_env(cache_dir))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    first, last = sum(r["loss"] for r in rows[:3]) / 3, sum(r["loss"] for r in rows[-3:]) / 3
    assert last < first - 1.0, (first, last)
    assert {"loss", "learning_rate", "grad_norm", "tokens_per_s", "step_time_s"} <= set(rows[-1])
    assert rows[0]["learning_rate"] == 0.0 and max(r["learning_rate"] for r in rows) == pytest.approx(3e-3)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"]["eval_loss"] < rows[0]["loss"]
    assert summary["metrics"]["preflight_predicted_step_s"] > 0 and summary["metrics"]["measured_step_s"] > 0
    assert summary["result"]["artifacts"]["last_checkpoint"].endswith("step_30")
    assert (tmp_path / "hf_export" / "model.safetensors").is_file()
    patches = json.loads((tmp_path / "patches.json").read_text())
    assert patches["counts"] == {"applied": 4, "skipped": 0, "failed": 0}


@pytest.mark.slow
def test_kill_resume_is_bit_identical(tmp_path, cache_dir):
    check_kill_resume(tmp_path, [*RECIPE, "pretrain.steps=6", "pretrain.checkpoint.every=2",
                                 "pretrain.eval.every=3", "pretrain.export_hf=false"],
                      kill_after_checkpoint=2, env=_env(cache_dir))


@pytest.mark.slow
@pytest.mark.parametrize("axis, model", [("tp", "tiny_llama"), ("pp", "tiny_qwen2"), ("dp", "tiny_qwen3")])
def test_two_ranks_train_the_losses_of_one(axis, model, tmp_path, cache_dir):
    """pp with tied embeddings (qwen2): the embedding's gradient is summed over the first and last stage."""
    single = run_cli([*PARITY, f"model={model}", f"hydra.run.dir={tmp_path / 'one'}"], env=_env(cache_dir))
    assert single.returncode == 0, single.stderr[-3000:]
    double = _torchrun([*PARITY, f"model={model}", f"parallel.{axis}=2", f"hydra.run.dir={tmp_path / 'two'}"],
                       cache_dir)
    assert double.returncode == 0, double.stderr[-3000:]
    one, two = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert len(one) == len(two) == 4
    assert max(abs(a - b) for a, b in zip(one, two)) <= LOSS_TOLERANCE, (one, two)
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["metrics"]["layout"][axis] == 2


@pytest.mark.slow
def test_a_tp1_checkpoint_resumes_at_tp2(tmp_path, cache_dir):
    first = run_cli([*PARITY, "pretrain.checkpoint.every=2", "pretrain.steps=2", f"hydra.run.dir={tmp_path}"],
                    env=_env(cache_dir))
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _torchrun([*PARITY, "pretrain.checkpoint.every=2", "parallel.tp=2", f"hydra.run.dir={tmp_path}"],
                        cache_dir)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metrics"]["resumed_from_step"] == 2 and summary["metrics"]["layout"]["tp"] == 2
    straight = run_cli([*PARITY, f"hydra.run.dir={tmp_path / 'straight'}"], env=_env(cache_dir))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert _losses(tmp_path)[2:] == pytest.approx(_losses(tmp_path / "straight")[2:], abs=LOSS_TOLERANCE)


@pytest.mark.slow
def test_a_maxtext_grpo_run_starts_from_the_export(tmp_path, cache_dir):
    pretrain = run_cli([*RECIPE, "model=tiny_qwen2", "pretrain.steps=4", "pretrain.eval.every=0",
                        "pretrain.checkpoint.every=0", f"hydra.run.dir={tmp_path / 'pretrain'}"], env=_env(cache_dir))
    assert pretrain.returncode == 0, pretrain.stderr[-3000:]
    export = tmp_path / "pretrain" / "hf_export"
    grpo = run_cli(["recipe=grpo_arithmetic_cpu", f"model.path={export}", "grpo.steps=2", "progress=false",
                    f"hydra.run.dir={tmp_path / 'grpo'}"], env=_env(cache_dir))
    assert grpo.returncode == 0, grpo.stderr[-3000:]
    rows = read_metrics(tmp_path / "grpo" / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]


@pytest.mark.slow
def test_tp2_x_pp2_on_four_ranks_trains_and_exports_the_weights_of_one(tmp_path, cache_dir):
    """Tied Qwen2 over 4 gloo ranks: the same losses, a checkpoint with every rank's shards, and an HF
    export (gathered from all ranks) equal to the single rank's within EXPORT_TOLERANCE."""
    from safetensors.torch import load_file

    run = [*PARITY, "model=tiny_qwen2", "pretrain.export_hf=true"]
    single = run_cli([*run, f"hydra.run.dir={tmp_path / 'one'}"], env=_env(cache_dir))
    assert single.returncode == 0, single.stderr[-3000:]
    four = _torchrun([*run, "parallel.tp=2", "parallel.pp=2", "pretrain.checkpoint.every=4",
                      f"hydra.run.dir={tmp_path / 'four'}"], cache_dir, ranks=4)
    assert four.returncode == 0, four.stderr[-3000:]
    assert _losses(tmp_path / "four") == pytest.approx(_losses(tmp_path / "one"), abs=LOSS_TOLERANCE)
    shards = sorted(p.name for p in (tmp_path / "four" / "checkpoints" / "step_4").glob("__*.distcp"))
    assert {name.split("_")[2] for name in shards} == {"0", "1", "2", "3"}  # every rank wrote into the folder
    one, many = (load_file(str(tmp_path / d / "hf_export" / "model.safetensors")) for d in ("one", "four"))
    assert sorted(one) == sorted(many)
    assert max((one[k] - many[k]).abs().max().item() for k in one) <= EXPORT_TOLERANCE
