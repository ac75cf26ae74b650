"""`python run.py recipe=sft_mlx_cpu|dpo_mlx_cpu` end to end (one or two steps), resume after kill -9,
and the fused export as the starting point of backend maxtext."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from framework.core.loggers import read_metrics  # noqa: E402
from tests.conformance import check_kill_resume  # noqa: E402
from tests.conftest import run_cli  # noqa: E402

STEP_METRICS = {"sft": ["loss", "learning_rate", "grad_norm", "tokens_per_s", "step_time_s", "eval_loss"],
                "dpo": ["loss", "rewards_accuracy", "rewards_margin", "rewards_chosen", "rewards_rejected",
                        "learning_rate", "grad_norm", "step_time_s", "eval_loss", "eval_rewards_margin"]}


def run_recipe(task: str, run_dir, cache, *extra: str):
    proc = run_cli([f"recipe={task}_mlx_cpu", f"{task}.steps=2", f"{task}.eval.every=2",
                    f"{task}.eval.num_examples=4", f"{task}.checkpoint.every=1", "progress=false",
                    f"hydra.run.dir={run_dir}", *extra], env={"CRUCIBLE_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((run_dir / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("task", ["sft", "dpo"])
def test_recipe_runs_end_to_end(task, tmp_path, mlx_cache):
    summary = run_recipe(task, tmp_path, mlx_cache)
    assert summary["status"] == "ok" and summary["backend"] == "mlx"
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert not [m for m in STEP_METRICS[task] if not isinstance(rows[-1].get(m), float)], rows[-1]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_1", "step_2"]
    checkpoint = tmp_path / "checkpoints" / "step_2"
    assert {"adapters.safetensors", "optimizer.safetensors", "manifest.json"} <= {p.name for p in checkpoint.iterdir()}
    assert summary["result"]["artifacts"]["last_checkpoint"] == str(checkpoint)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "hf_export").iterdir()}
    patches = json.loads((tmp_path / "patches.json").read_text())["patches"]
    assert [p["status"] for p in patches if p["id"] == "mlx.rope_parameters"] == ["applied"]


@pytest.mark.slow
def test_kill_resume_is_bit_identical(tmp_path, mlx_cache):
    check_kill_resume(tmp_path, ["recipe=dpo_mlx_cpu", "dpo.steps=4", "dpo.checkpoint.every=1", "dpo.eval.every=0",
                                 "dpo.export_hf=false", "dpo.lora.dropout=0.1"],
                      kill_after_checkpoint=2, env={"CRUCIBLE_CACHE": str(mlx_cache)})


@pytest.mark.slow
def test_export_is_a_starting_point_for_maxtext_grpo(tmp_path, mlx_cache):
    pytest.importorskip("jax")
    run_recipe("sft", tmp_path / "sft", mlx_cache)
    export = tmp_path / "sft" / "hf_export"
    proc = run_cli(["recipe=grpo_arithmetic_cpu", "grpo.steps=1", f"model.path={export}", "model.random_init=false",
                    "progress=false", f"hydra.run.dir={tmp_path / 'grpo'}"], env={"CRUCIBLE_CACHE": str(mlx_cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "grpo" / "summary.json").read_text())["status"] == "ok"


@pytest.mark.slow
def test_seeded_dpo_raises_margin_and_accuracy_on_held_out_pairs(tmp_path, mlx_cache):
    """The recipe as shipped (seed 0): 20 steps, eval on 32 pairs of the test split at steps 10 and 20.
    Measured: margin 0.012 -> 0.075, accuracy 0.59 -> 0.66 (both are exactly 0 before step 1: policy = reference)."""
    proc = run_cli(["recipe=dpo_mlx_cpu", "dpo.checkpoint.every=0", "dpo.export_hf=false", "progress=false",
                    f"hydra.run.dir={tmp_path}"], env={"CRUCIBLE_CACHE": str(mlx_cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "eval_rewards_margin" in r]
    assert [r["step"] for r in evals] == [10, 20]
    assert evals[1]["eval_rewards_margin"] > max(0.03, 2 * evals[0]["eval_rewards_margin"])
    assert evals[1]["eval_rewards_accuracy"] > 0.55


@pytest.mark.slow
def test_the_three_references_agree_when_the_reference_is_the_base_model(tmp_path, mlx_cache, tiny_dir):
    """reference=base (adapters off), precomputed (once, before training, in other padded shapes) and model
    (a second copy of the base weights) give the same training metrics, row for row (to float32 rounding)."""
    runs = {name: ["dpo.reference=" + name] for name in ("base", "precomputed")}
    runs["model"] = ["dpo.reference=model", f"dpo.reference_model={tiny_dir}"]
    rows = {}
    for name, extra in runs.items():
        run_recipe("dpo", tmp_path / name, mlx_cache, f"model.path={tiny_dir}", "model.random_init=false",
                   "dpo.export_hf=false", "dpo.optimizer.warmup_steps=0", *extra)
        rows[name] = [{k: v for k, v in r.items() if "time" not in k} for r in read_metrics(tmp_path / name / "metrics.jsonl")]
    assert rows["base"][-1]["rewards_margin"] != 0.0  # the adapters moved after one step
    for name in ("precomputed", "model"):
        assert [r.keys() for r in rows[name]] == [r.keys() for r in rows["base"]]
        for row, base in zip(rows[name], rows["base"]):
            assert all(abs(row[k] - base[k]) <= 1e-5 * (1 + abs(base[k])) for k in base), (name, row, base)


@pytest.mark.slow
def test_export_is_a_starting_point_for_backend_torch(tmp_path, mlx_cache):
    """A torch SFT run from the MLX export (skips where backend torch, recipe sft_torch_cpu, is absent)."""
    from tests.conftest import REPO_ROOT

    if not (REPO_ROOT / "recipes" / "sft_torch_cpu.yaml").is_file():
        pytest.skip("backend torch (recipe sft_torch_cpu) is not in this checkout")
    run_recipe("dpo", tmp_path / "dpo", mlx_cache)
    export = tmp_path / "dpo" / "hf_export"
    proc = run_cli(["recipe=sft_torch_cpu", "sft.steps=1", "sft.eval.every=0", "sft.checkpoint.every=0",
                    f"model.path={export}", "model.random_init=false", "progress=false",
                    f"hydra.run.dir={tmp_path / 'torch'}"], env={"CRUCIBLE_CACHE": str(mlx_cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "torch" / "summary.json").read_text())["status"] == "ok"
