"""DPO learns: on held-out pairs of the shipped preference sample, the reward margin and the share of pairs
whose chosen answer gets the higher reward rise (tiny random-init model, CPU, seeded)."""

import json

import pytest

from framework.core.loggers import read_metrics
from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def test_dpo_raises_held_out_margin_and_accuracy(tmp_path):
    proc = run_cli(["recipe=dpo_torch_cpu", "dpo.steps=60", "dpo.finetune=full", "dpo.optimizer.learning_rate=1.0e-3",
                    "dpo.eval.every=30", "dpo.eval.num_examples=64", "dpo.checkpoint.every=0", "dpo.export_hf=false",
                    f"hydra.run.dir={tmp_path}", "progress=false"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    evals = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "eval_rewards_margin" in r]
    assert [r["step"] for r in evals] == [30, 60]
    first, last = evals[0], evals[-1]
    # at step 0 the policy is the reference: margin 0, loss ln 2 = 0.693, no pair ranked right (ties); the
    # held-out margin grows with training and more pairs than chance rank the correct answer higher
    assert last["eval_rewards_margin"] > first["eval_rewards_margin"] > 0.05
    assert last["eval_rewards_accuracy"] > 0.55
    assert last["eval_loss"] < 0.66
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "ok"
