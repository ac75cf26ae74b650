"""The backend-neutral task schemas build from their YAML through the one builder; bad values name the key."""

import pytest
import yaml

from framework.core.build import build
from framework.core.errors import ConfigError
from framework.data.records import PreferencePair
from framework.tasks.dpo import DPOTask, check_distinct_pairs, check_dpo
from framework.tasks.pretrain import PretrainTask, check_pretrain
from framework.tasks.sft import SFTTask, check_sft

CASES = {"sft": (SFTTask, check_sft), "dpo": (DPOTask, check_dpo), "pretrain": (PretrainTask, check_pretrain)}


def node(task):
    from framework.core.paths import REPO_ROOT

    return yaml.safe_load((REPO_ROOT / "conf" / "task" / f"{task}.yaml").read_text())[task]


@pytest.mark.parametrize("task", sorted(CASES))
def test_yaml_builds_and_passes_its_checks(task):
    cls, check = CASES[task]
    check(build(cls, node(task), task))


@pytest.mark.parametrize("task, key, value, message", [
    ("dpo", "loss_type", "kto", r"dpo.loss_type: expected one of"),
    ("dpo", "reference", "model", r"dpo.reference_model: set it exactly when"),
    ("dpo", "label_smoothing", 0.1, None),
    ("sft", "micro_batch_size", 5, r"sft.micro_batch_size: 5 must divide"),
    ("sft", "steps", 0, r"sft.steps: 0 is out of range; valid: >= 1"),
    ("pretrain", "split", [0, 1, 0], r"pretrain.split"),
])
def test_bad_values_name_the_key(task, key, value, message):
    cls, check = CASES[task]
    values = {**node(task), key: value}
    if message is None:
        check(build(cls, values, task))
        return
    with pytest.raises(ConfigError, match=message):
        check(build(cls, values, task))


def test_unknown_and_nested_keys_are_named():
    with pytest.raises(ConfigError, match=r"sft.lora.rnak: unknown key"):
        build(SFTTask, {**node("sft"), "lora": {**node("sft")["lora"], "rnak": 4}}, "sft")


def test_identical_pairs_of_the_same_text_say_to_fix_the_data(caplog):
    """Raising max_completion_length cannot part a pair whose chosen and rejected are one text."""
    user = [{"role": "user", "content": "q"}]
    pairs = [PreferencePair(user, "same", "same"), PreferencePair(user, "a b c", "a b d")]
    with pytest.raises(ConfigError, match=r"2 of 2 training pairs of f.jsonl .* \(1 of them have the same chosen "
                                          r"and rejected text: fix the data\)$"):
        check_distinct_pairs(pairs, iter([([1], [1]), ([2, 3], [2, 3])]), 2, "f.jsonl")  # read once, as torch's batches
    check_distinct_pairs(pairs, [([1], [1]), ([2, 3], [2, 4])], 3, "f.jsonl")
    assert "1 of 2 training pairs of f.jsonl" in caplog.text and "train on nothing" in caplog.text
    caplog.clear()
    check_distinct_pairs(pairs, [([1], [2]), ([2, 3], [2, 4])], 3, "f.jsonl")
    assert not caplog.text
