"""Math word problems for GRPO from a `data` group (framework.backends.maxtext.config.DataSpec)."""

from __future__ import annotations

from framework.backends.maxtext.config import DataSpec
from framework.data.arithmetic import generate_arithmetic
from framework.data.gsm8k import MathExample, load_gsm8k
from framework.data.prompts import SYSTEM_PROMPT

DEFAULT_SYSTEM_PROMPT = "default"
_TEST_SEED_OFFSET = 1  # the synthetic test split is drawn with seed + 1


def load_split(spec: DataSpec, split: str, limit: int | None = None) -> list[MathExample]:
    """The `train` or `test` problems of the data set (the first `limit` of them)."""
    if spec.source == "synthetic":
        settings = spec.arithmetic
        count = settings.num_train if split == "train" else settings.num_test
        seed = settings.seed if split == "train" else settings.seed + _TEST_SEED_OFFSET
        examples = generate_arithmetic(count, seed=seed, num_operands=settings.num_operands,
                                       max_value=settings.max_value, ops=tuple(settings.ops))
        return examples[:limit]
    source = "sample" if spec.source == "sample" else spec.path
    return load_gsm8k(source, split, limit)


def train_examples(spec: DataSpec) -> list[MathExample]:
    return load_split(spec, "train", spec.train_limit)


def system_prompt(spec: DataSpec) -> str | None:
    return SYSTEM_PROMPT if spec.system_prompt == DEFAULT_SYSTEM_PROMPT else spec.system_prompt
