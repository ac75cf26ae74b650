"""Math word problems (GSM8K and synthetic arithmetic) for RL tasks such as GRPO: the `data` group of
format `math` and its loaders. Backend-neutral: any backend's GRPO reads problems from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional

from framework.core.errors import ConfigError
from framework.core.ranges import Count, Range
from framework.data.arithmetic import generate_arithmetic
from framework.data.gsm8k import MathExample, load_gsm8k
from framework.data.prompts import SYSTEM_PROMPT

DEFAULT_SYSTEM_PROMPT = "default"
_TEST_SEED_OFFSET = 1  # the synthetic test split is drawn with seed + 1


@dataclass
class ArithmeticSpec:
    """Settings of framework.data.arithmetic.generate_arithmetic (train and test drawn apart)."""

    num_train: Count
    num_test: Count
    num_operands: Annotated[int, Range(2)]  # one operand is no sum
    max_value: Count
    ops: list[Literal["+", "-", "*"]]  # framework.data.arithmetic.SUPPORTED_OPS
    seed: int

    def __post_init__(self) -> None:
        if not self.ops:  # a list's items are typed, not its length
            raise ConfigError("data.arithmetic.ops: []; valid: a non-empty list of '+', '-', '*'")


@dataclass
class MathSpec:
    """A `data` group of format math: where the problems come from."""

    name: str
    format: Literal["math"]
    source: Literal["hub", "local", "sample", "synthetic"]
    path: Optional[str]  # hub: dataset id; local: a folder with train.jsonl/test.jsonl; else null
    train_limit: Optional[Count]  # use only the first train_limit training problems; null = all
    system_prompt: Optional[str]  # "default" = framework.data.prompts.SYSTEM_PROMPT; null = none
    arithmetic: Optional[ArithmeticSpec]  # source=synthetic only

    def check(self) -> None:
        if self.source in ("hub", "local") and not self.path:
            raise ConfigError(f"data.path: source={self.source} needs a path (a hub dataset id or a local folder)")
        if (self.source == "synthetic") != (self.arithmetic is not None):
            raise ConfigError("data.arithmetic: set it (a mapping) exactly when data.source=synthetic, else null")
        path = Path(str(self.path)).expanduser()
        if self.source == "local" and not path.exists():  # was '<path>: no such GSM8K jsonl file', naming no key
            where = "" if path.is_absolute() else f", relative to {Path.cwd()}"
            raise ConfigError(f"data.path: {self.path}: no such file or folder (data.source=local{where}); valid: a "
                              f"jsonl file, or a folder holding train.jsonl and test.jsonl (data=gsm8k_local reads "
                              f"the environment's CRUCIBLE_GSM8K_DIR)")


def check_arithmetic_node(data: dict) -> None:
    """Arithmetic settings on a data set that is not synthetic: a recipe for data=arithmetic (such as
    recipe=grpo_arithmetic_cpu, which sets data.arithmetic.max_value) run with another data=; Hydra merges its
    partial node into the data set's `arithmetic: null`, which would read as a missing num_train."""
    settings, source = data.get("arithmetic"), data.get("source")
    if source != "synthetic" and isinstance(settings, dict):
        raise ConfigError(f"data.arithmetic: {', '.join(sorted(settings))} set, but data={data.get('name')} "
                          f"(source={source}) is not synthetic; a recipe for data=arithmetic sets it: add "
                          "data.arithmetic=null, or use a recipe for this data set (GSM8K: recipe=grpo_gsm8k_cpu)")


def load_split(spec: MathSpec, split: str, limit: int | None = None) -> list[MathExample]:
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


def train_examples(spec: MathSpec) -> list[MathExample]:
    return load_split(spec, "train", spec.train_limit)


def system_prompt(spec: MathSpec) -> str | None:
    return SYSTEM_PROMPT if spec.system_prompt == DEFAULT_SYSTEM_PROMPT else spec.system_prompt
