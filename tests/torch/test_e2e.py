"""The CPU recipes end to end through `python run.py`, and the hand-off from backend maxtext's HF export."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from framework.core.loggers import read_metrics
from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def run_ok(args, tmp_path, name="run"):
    run_dir = tmp_path / name
    proc = run_cli([*args, f"hydra.run.dir={run_dir}", "progress=false"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok", summary
    return run_dir, summary


@pytest.mark.parametrize("task", ["sft", "dpo"])
def test_one_step_of_the_cpu_recipe(task, tmp_path):
    run_dir, summary = run_ok([f"recipe={task}_torch_cpu", f"{task}.steps=1", f"{task}.eval.num_examples=4",
                               f"{task}.eval.every=1"], tmp_path)
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 1] and "loss" in rows[0] and "eval_loss" in rows[1]
    if task == "dpo":
        assert {"rewards_margin", "rewards_accuracy", "rewards_chosen", "rewards_rejected"} <= set(rows[0])
    assert summary["result"]["artifacts"]["last_checkpoint"].endswith("step_1")
    assert (run_dir / "checkpoints" / "step_1" / "optimizer.safetensors").is_file()
    export = run_dir / "hf_export"
    assert (export / "model.safetensors").is_file() and (export / "adapter" / "adapter_config.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(export) is not None
    patches = json.loads((run_dir / "patches.json").read_text())
    assert patches["counts"]["failed"] == 0



@pytest.mark.parametrize("task", ["sft", "dpo"])
def test_a_single_file_data_set_trains_without_evaluating(task, tmp_path):
    """A local jsonl file has no test split: the run trains and skips eval (was: transformers' ValueError,
    eval steps without an eval dataset, exit 1)."""
    from framework.data.records import SAMPLES

    data = tmp_path / "train.jsonl"
    sample = "chat" if task == "sft" else "preference"
    data.write_text("".join((SAMPLES / sample / "train.jsonl").read_text().splitlines(keepends=True)[:16]))
    run_dir, _ = run_ok([f"recipe={task}_torch_cpu", f"{task}.steps=1", f"{task}.eval.every=1",
                         "data.source=local", f"data.path={data}", f"{task}.export_hf=false"], tmp_path)
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1]

def test_maxtext_export_starts_an_sft_and_a_dpo_run(tmp_path):
    grpo_dir, _ = run_ok(["recipe=grpo_arithmetic_cpu", "grpo.steps=2", "grpo.prompts_per_step=4",
                          "grpo.num_generations=2", "grpo.micro_batch_size=8", "grpo.export_hf=true"], tmp_path, "grpo")
    export = grpo_dir / "hf_export"
    args = [f"model.path={export}", "model.random_init=false"]
    sft_dir, _ = run_ok(["recipe=sft_torch_cpu", *args, "sft.steps=1", "sft.eval.every=0"], tmp_path, "sft")
    dpo_dir, _ = run_ok(["recipe=dpo_torch_cpu", *args, "dpo.steps=1", "dpo.eval.every=0",
                         "dpo.finetune=full"], tmp_path, "dpo")
    exported = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).state_dict()
    # the SFT run (LoRA on attention) started from the maxtext weights: its merged export keeps their embeddings
    sft_model = AutoModelForCausalLM.from_pretrained(sft_dir / "hf_export", dtype=torch.float32).state_dict()
    assert torch.equal(sft_model["model.embed_tokens.weight"], exported["model.embed_tokens.weight"])
    dpo_rows = read_metrics(dpo_dir / "metrics.jsonl")
    assert dpo_rows[0]["step"] == 1 and dpo_rows[0]["loss"] == pytest.approx(0.6931, abs=1e-3)  # policy = reference


def test_ddp_on_two_cpu_processes_matches_one_process(tmp_path):
    """torchrun with 2 ranks (gloo): the same global batch gives the same step-1 loss as one process; only
    rank 0 writes, and the checkpoint holds both ranks' RNG states."""
    import subprocess
    import sys

    from safetensors.torch import load_file

    from tests.conftest import REPO_ROOT

    args = ["recipe=sft_torch_cpu", "sft.steps=1", "sft.eval.every=0", "sft.global_batch_size=8",
            "sft.micro_batch_size=2", "sft.export_hf=false", "progress=false"]
    single, _ = run_ok(args, tmp_path, "single")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           str(REPO_ROOT / "run.py"), *args, f"hydra.run.dir={tmp_path / 'ddp'}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one, two = (read_metrics(tmp_path / name / "metrics.jsonl") for name in ("single", "ddp"))
    assert len(two) == 1 and two[0]["num_tokens"] == one[0]["num_tokens"]
    assert two[0]["loss"] == pytest.approx(one[0]["loss"], rel=1e-5)
    assert sorted(load_file(tmp_path / "ddp" / "checkpoints" / "step_1" / "rng.safetensors")) == ["0.cpu", "1.cpu"]
