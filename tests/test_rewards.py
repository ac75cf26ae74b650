"""Rewards on real GSM8K reference answers and on tricky completions."""

import threading
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from framework.core.errors import ConfigError, DataError
from framework.data.gsm8k import SAMPLE_DIR, read_jsonl
from framework.rl.rewards import (
    REWARD_FUNCTIONS,
    compute_rewards,
    correctness,
    extract_answer,
    format_reward,
    parse_number,
    tag_count,
)

SHARED_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"  # ../shared beside the repo
GSM8K_DIR = SHARED_GSM8K if SHARED_GSM8K.is_dir() else SAMPLE_DIR


@pytest.fixture(scope="module")
def real_examples():
    return read_jsonl(GSM8K_DIR / "train.jsonl") + read_jsonl(GSM8K_DIR / "test.jsonl")


def test_every_real_reference_is_a_number_and_rewards_itself(real_examples):
    for example in real_examples:
        assert parse_number(example.reference) is not None, example.reference
        assert correctness(f"<think>...</think><answer>{example.reference}</answer>", example.reference) == 1.0


def test_real_worked_solutions_are_scored_by_their_last_number(real_examples):
    # The data set's own solutions end with "#### n": no <answer> tag, so the last number is used.
    for example in real_examples:
        assert correctness(example.answer, example.reference) == 1.0


def test_real_references_with_separators_and_signs(real_examples):
    references = {example.reference for example in real_examples}
    with_separator = sorted(ref for ref in references if "," in ref)
    negative = sorted(ref for ref in references if ref.startswith("-"))
    assert with_separator and (negative or GSM8K_DIR == SAMPLE_DIR)
    for reference in with_separator:
        plain = reference.replace(",", "")
        assert correctness(f"<answer>{plain}</answer>", reference) == 1.0
        assert correctness(f"<answer>{int(plain) + 1}</answer>", reference) == 0.0
    for reference in negative:
        assert correctness(f"<answer>{reference}</answer>", reference) == 1.0
        assert correctness(f"<answer>{reference[1:]}</answer>", reference) == 0.0


def test_wrong_answers_on_real_references_score_zero(real_examples):
    for example in real_examples[:100]:
        wrong = parse_number(example.reference) + 1
        assert correctness(f"<think>x</think><answer>{wrong}</answer>", example.reference) == 0.0


@pytest.mark.parametrize(
    ("completion", "reference", "expected"),
    [
        ("<answer>$1,234.50</answer>", "1234.5", 1.0),
        ("<answer>1,234</answer>", "1234", 1.0),
        ("<answer>1234</answer>", "1,234", 1.0),
        ("<answer>1,234,567</answer>", "1234567", 1.0),
        ("<answer>-3</answer>", "-3", 1.0),
        ("<answer>\u22123</answer>", "-3", 1.0),
        ("<answer>-3</answer>", "3", 0.0),
        ("<answer>3/4</answer>", "0.75", 1.0),
        ("<answer>6/8</answer>", "3/4", 1.0),
        ("<answer>2.0</answer>", "2", 1.0),
        ("<answer>2.50</answer>", "2.5", 1.0),
        ("<answer>18 dollars</answer>", "18", 1.0),
        ("<answer>50%</answer>", "50", 1.0),
        ("<answer>5 + 7 = 12</answer>", "12", 1.0),
        ("<answer>5 + 7 = 12</answer>", "5", 0.0),
        ("She had 5 apples, bought 12 more, so 17 in all.", "17", 1.0),
        ("She had 5 apples, bought 12 more, so 17 in all.", "12", 0.0),
        ("<answer>7</answer> and then <answer>9</answer>", "9", 1.0),
        ("<think>it is 4</think><answer> </answer>", "4", 1.0),
        ("<think>no idea</think><answer>many</answer>", "4", 0.0),
        ("", "4", 0.0),
    ],
)
def test_correctness_on_tricky_completions(completion, reference, expected):
    assert correctness(completion, reference) == expected


def test_extraction_and_parsing_by_hand():
    assert extract_answer("<think>2 + 2</think>\n<answer>\n 4 \n</answer>") == "4"
    assert extract_answer("so 3, then 4.5") == "4.5"
    assert extract_answer("nothing here") is None
    assert parse_number("$1,234.50") == Fraction(2469, 2)
    assert parse_number("-3/4 cup") == Fraction(-3, 4)
    assert parse_number("it costs .5") == Fraction(1, 2)
    assert parse_number("1/0") is None


def test_math_verify_adds_latex_answers():
    pytest.importorskip("math_verify")
    assert correctness("<answer>\\frac{3}{4}</answer>", "0.75") == 1.0
    assert correctness("<answer>\\frac{3}{5}</answer>", "0.75") == 0.0


def test_numeric_path_works_off_the_main_thread():
    # math-verify's signal-based timeouts only work in the main thread; the numeric path must not need it.
    scores = []
    worker = threading.Thread(target=lambda: scores.append(correctness("<answer>$1,200</answer>", "1,200")))
    worker.start()
    worker.join()
    assert scores == [1.0]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>2 + 2 = 4</think><answer>4</answer>", 1.0),
        ("<think>\n2 + 2 = 4\n</think>\n<answer>\n4\n</answer>\n", 1.0),
        ("<answer>4</answer>", 0.0),
        ("<think>a</think>", 0.0),
        ("<answer>4</answer><think>a</think>", 0.0),
        ("<think>a</think><answer>4</answer> trailing words", 0.0),
        ("<think>a</think><answer>4</answer><answer>5</answer>", 0.0),
        ("<think>a <think> b</think><answer>4</answer>", 0.0),
        ("preamble <think>a</think><answer>4</answer>", 0.0),
    ],
)
def test_format_is_strict(completion, expected):
    assert format_reward(completion, "4") == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<think>a</think><answer>4</answer>", 1.0),
        ("<answer>4</answer>", 0.5),
        ("<think>a <think> b</think><answer>4</answer>", 0.75),
        ("<think>a</think><answer>4</answer>" + "x" * 100, 0.9),
        ("<think>a</think><answer>4</answer>" + "x" * 5000, 0.0),
        ("no tags", 0.0),
    ],
)
def test_tag_count_partial_credit(completion, expected):
    assert tag_count(completion, "4") == pytest.approx(expected)


def test_compute_rewards_weighted_sum():
    completions = [
        "<think>a</think><answer>4</answer>",  # correct, formatted
        "<answer>5</answer>",  # wrong, half the tags
        "the answer is 4",  # correct by last number, no format
    ]
    weights = {"correctness": 1.0, "format": 0.5, "tag_count": 0.25}
    total, per_function = compute_rewards(completions, ["4", "4", "4"], weights)
    np.testing.assert_allclose(per_function["correctness"], [1.0, 0.0, 1.0])
    np.testing.assert_allclose(per_function["format"], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(per_function["tag_count"], [1.0, 0.5, 0.0])
    np.testing.assert_allclose(total, [1.75, 0.125, 1.0])
    assert total.dtype == np.float32 and set(per_function) == {"correctness", "format", "tag_count"}


def test_compute_rewards_rejects_unknown_names_and_mismatched_lengths():
    with pytest.raises(ConfigError) as error:
        compute_rewards(["x"], ["1"], {"correctnes": 1.0})
    assert "correctnes" in str(error.value) and ", ".join(sorted(REWARD_FUNCTIONS)) in str(error.value)
    with pytest.raises(ConfigError, match="rewards: empty"):
        compute_rewards(["x"], ["1"], {})
    with pytest.raises(DataError, match="2 completions but 1 references"):
        compute_rewards(["x", "y"], ["1"], {"format": 1.0})


def test_weights_that_are_all_zero_are_refused():
    """Every reward 0 whatever the completions: no group ever differs, the run learned nothing and said so only at
    its end (framework/rl/learning_signal.py); one weight other than 0 is enough."""
    with pytest.raises(ConfigError, match=r"^rewards: every weight is 0 \(correctness=0, format=0.0\): every reward "
                                          r"would be 0 and the model learn nothing; valid: at least one weight other"):
        compute_rewards(["x"], ["1"], {"correctness": 0, "format": 0.0})
    assert compute_rewards(["x"], ["1"], {"correctness": 0, "format": -0.5})[0].shape == (1,)
