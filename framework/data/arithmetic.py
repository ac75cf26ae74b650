"""A seeded synthetic arithmetic data set in GSM8K's format, easy enough for a tiny model to learn.

"What is 7 + 3 * 2?" with the answer "7 + 3 * 2 = <<7+3*2=13>>13\\n#### 13". Operands are drawn
uniformly from 0..max_value; `*` binds tighter than `+` and `-` (normal precedence), so results
can be negative when `-` is allowed. The same seed and settings always give the same examples.
"""

from __future__ import annotations

import random

from framework.core.errors import ConfigError
from framework.data.gsm8k import MathExample

SUPPORTED_OPS = ("+", "-", "*")


def generate_arithmetic(
    num_examples: int,
    seed: int = 0,
    num_operands: int = 2,
    max_value: int = 9,
    ops: tuple[str, ...] | list[str] = ("+", "-"),
) -> list[MathExample]:
    """`num_examples` problems with `num_operands` operands in 0..`max_value`, joined by operators from `ops`."""
    validate_difficulty(num_examples, num_operands, max_value, ops)
    rng = random.Random(seed)
    return [random_example(rng, num_operands, max_value, tuple(ops)) for _ in range(num_examples)]


def validate_difficulty(num_examples: int, num_operands: int, max_value: int, ops) -> None:
    if num_examples < 1:
        raise ConfigError(f"arithmetic num_examples={num_examples}: must be >= 1")
    if num_operands < 2:
        raise ConfigError(f"arithmetic num_operands={num_operands}: must be >= 2")
    if max_value < 1:
        raise ConfigError(f"arithmetic max_value={max_value}: must be >= 1")
    unknown = [op for op in ops if op not in SUPPORTED_OPS]
    if not ops or unknown:
        raise ConfigError(f"arithmetic ops={list(ops)}: choose a non-empty subset of {list(SUPPORTED_OPS)}")


def random_example(rng: random.Random, num_operands: int, max_value: int, ops: tuple[str, ...]) -> MathExample:
    operands = [rng.randint(0, max_value) for _ in range(num_operands)]
    operators = [rng.choice(ops) for _ in range(num_operands - 1)]
    result = evaluate(operands, operators)
    spaced = render_expression(operands, operators, separator=" ")
    compact = render_expression(operands, operators, separator="")
    return MathExample(
        question=f"What is {spaced}?",
        answer=f"{spaced} = <<{compact}={result}>>{result}\n#### {result}",
        reference=str(result),
    )


def render_expression(operands: list[int], operators: list[str], separator: str) -> str:
    parts = [str(operands[0])]
    for operator, operand in zip(operators, operands[1:]):
        parts += [operator, str(operand)]
    return separator.join(parts)


def evaluate(operands: list[int], operators: list[str]) -> int:
    """Evaluate with `*` before `+`/`-`, without eval(): sum signed products, left to right."""
    total, sign, term = 0, 1, operands[0]
    for operator, operand in zip(operators, operands[1:]):
        if operator == "*":
            term *= operand
        else:
            total += sign * term
            sign, term = (1 if operator == "+" else -1), operand
    return total + sign * term
