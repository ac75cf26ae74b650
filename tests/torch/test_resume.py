"""kill -9 right after a checkpoint -> resume -> the same final weights, optimizer state and metrics rows (CPU)."""

import pytest

from framework.core.loggers import read_metrics
from tests.conformance import check_kill_resume

pytestmark = pytest.mark.slow


def test_sft_kill_resume_is_bit_identical(tmp_path):
    # LoRA dropout on, two micro-batches per step (accumulation), eval between checkpoints: all must line up
    check_kill_resume(tmp_path, ["recipe=sft_torch_cpu", "sft.steps=6", "sft.checkpoint.every=2", "sft.eval.every=3",
                                 "sft.eval.num_examples=4"], kill_after_checkpoint=2)


def test_dpo_kill_resume_is_bit_identical(tmp_path):
    # the recipe's completion length: cut to 48 tokens 253 of the 256 pairs had the same chosen and rejected tokens
    # (zero gradients, weights that never moved: identical whatever the resume restored)
    check_kill_resume(tmp_path, ["recipe=dpo_torch_cpu", "dpo.steps=4", "dpo.checkpoint.every=2", "dpo.eval.every=0",
                                 "dpo.max_prompt_length=48"], kill_after_checkpoint=2)
    norms = [row["grad_norm"] for row in read_metrics(tmp_path / "straight" / "metrics.jsonl") if "grad_norm" in row]
    assert len(norms) == 4 and min(norms) > 0, norms
