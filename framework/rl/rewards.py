"""Rule-based rewards for math reasoning (GSM8K style), pure Python and backend-neutral.

Each reward function takes one completion and its reference answer (the text after `####`) and
returns a float. `compute_rewards` runs a weighted set of them over a batch. Add one with
`@register_reward("name")`; REWARD_FUNCTIONS is the lookup a task's `rewards: {name: weight}` names.

- `correctness`: 1.0 when the answer equals the reference. The answer is the content of the last
  `<answer>` tag, or else the last number in the completion. Numbers are compared exactly as
  fractions after removing thousands separators, currency and units ("$1,234.50" == 1234.5,
  "3/4" == 0.75, "2.0" == 2); when math-verify is installed it is asked as well, which adds
  LaTeX such as `\\frac{3}{4}` or `\\boxed{72}`.
- `format`: 1.0 for exactly `<think>...</think><answer>...</answer>` (whitespace around allowed).
- `tag_count`: 0.25 for each of the four tags that appears exactly once, minus 0.001 per character
  after `</answer>`, clipped to [0, 1] (partial credit, as in the common GRPO GSM8K recipes).
"""

from __future__ import annotations

import re
import threading
from fractions import Fraction
from typing import Callable, Mapping, Sequence

import numpy as np

from framework.core.errors import ConfigError, DataError

RewardFunction = Callable[[str, str], float]

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
STRICT_FORMAT = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.DOTALL)
FORMAT_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
# A number: optional minus, digits with optional thousands separators, optional decimals, or a
# leading-dot decimal; optionally followed by "/denominator" for fractions like 3/4.
NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|-?\.\d+")
TRAILING_TEXT_PENALTY_PER_CHAR = 0.001
REWARD_FUNCTIONS: dict[str, RewardFunction] = {}


def register_reward(name: str) -> Callable[[RewardFunction], RewardFunction]:
    """Register `fn(completion, reference) -> float` under `name`."""

    def register(fn: RewardFunction) -> RewardFunction:
        if name in REWARD_FUNCTIONS:
            raise ValueError(f"reward {name!r} is registered twice")
        REWARD_FUNCTIONS[name] = fn
        return fn

    return register


def check_reward_weights(weights: Mapping[str, float], key: str) -> None:
    """A non-empty {name: weight} whose names are registered; ConfigError names `key` and the valid names."""
    unknown = sorted(set(weights) - set(REWARD_FUNCTIONS))
    if unknown or not weights:
        raise ConfigError(f"{key}: {unknown[0] if unknown else 'empty'} is not a reward; give {{name: weight}} with "
                          f"names from {', '.join(sorted(REWARD_FUNCTIONS))}")
    if not any(weights.values()):  # every reward 0 whatever the completions: no advantage, nothing learned
        raise ConfigError(f"{key}: every weight is 0 ({', '.join(f'{k}={v}' for k, v in weights.items())}): every "
                          f"reward would be 0 and the model learn nothing; valid: at least one weight other than 0")


def extract_answer(completion: str) -> str | None:
    """The model's final answer: the last `<answer>` tag's content, else the last number, else None."""
    tagged = ANSWER_TAG.findall(completion)
    if tagged and tagged[-1].strip():
        return tagged[-1].strip()
    numbers = NUMBER.findall(normalize_minus_signs(completion))
    return numbers[-1] if numbers else None


def normalize_minus_signs(text: str) -> str:
    return text.replace("\u2212", "-").replace("\u2013", "-")


def parse_number(text: str) -> Fraction | None:
    """The last number in `text` as an exact Fraction ("$1,234.50" -> 2469/2, "-3/4" -> -3/4), or None."""
    numbers = NUMBER.findall(normalize_minus_signs(text))
    if not numbers:
        return None
    number = numbers[-1].replace(",", "").replace(" ", "")
    numerator, _, denominator = number.partition("/")
    if denominator and Fraction(denominator) == 0:
        return None
    return Fraction(numerator) / (Fraction(denominator) if denominator else 1)


def numbers_equal(answer: str, reference: str) -> bool:
    answer_value, reference_value = parse_number(answer), parse_number(reference)
    return answer_value is not None and answer_value == reference_value


def math_verify_equal(answer: str, reference: str) -> bool:
    """math-verify's verdict; False when it is not installed or we are off the main thread.

    math-verify's timeouts use signal.alarm, which only works in the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        from math_verify import parse, verify
    except ImportError:
        return False
    gold, predicted = parse(reference), parse(answer)
    return bool(gold and predicted and verify(gold, predicted))


@register_reward("correctness")
def correctness(completion: str, reference: str) -> float:
    answer = extract_answer(completion)
    if answer is None:
        return 0.0
    return 1.0 if numbers_equal(answer, reference) or math_verify_equal(answer, reference) else 0.0


@register_reward("format")
def format_reward(completion: str, reference: str) -> float:
    del reference  # the format does not depend on the answer
    if not STRICT_FORMAT.fullmatch(completion):
        return 0.0
    return 1.0 if all(completion.count(tag) == 1 for tag in FORMAT_TAGS) else 0.0


@register_reward("tag_count")
def tag_count(completion: str, reference: str) -> float:
    del reference
    score = sum(0.25 for tag in FORMAT_TAGS if completion.count(tag) == 1)
    if "</answer>" in completion:
        trailing = completion.rsplit("</answer>", 1)[1].strip()
        score -= TRAILING_TEXT_PENALTY_PER_CHAR * len(trailing)
    return min(max(score, 0.0), 1.0)


def compute_rewards(
    completions: Sequence[str], references: Sequence[str], weights: Mapping[str, float]
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Weighted sum of the named rewards, per completion.

    Returns (total [N] float32, {name: [N] float32 unweighted scores}) for the names in `weights`.
    """
    check_reward_weights(weights, "rewards")
    if len(completions) != len(references):
        raise DataError(f"compute_rewards got {len(completions)} completions but {len(references)} references")
    per_function = {
        name: np.array([REWARD_FUNCTIONS[name](c, r) for c, r in zip(completions, references)], dtype=np.float32)
        for name in weights
    }
    total = np.zeros(len(completions), dtype=np.float32)
    for name, scores in per_function.items():
        total += np.float32(weights[name]) * scores
    return total, per_function
