"""A key typed `X | Literal[...]` (grpo.micro_batch_size: a count or auto) says what each arm accepts."""

import typing

from framework.core.validation import type_error
from framework.tasks.grpo import GRPOTask
from tests.conftest import run_cli

MICRO_BATCH = typing.get_type_hints(GRPOTask, include_extras=True)["micro_batch_size"]


def test_each_arm_says_what_it_accepts():
    assert type_error("big", MICRO_BATCH) == "expected an integer or one of ['auto'], got 'big'"
    assert type_error(0, MICRO_BATCH) == "0 is out of range; valid: >= 1 or one of ['auto'], got 0"
    assert type_error(16, MICRO_BATCH) is None and type_error("auto", MICRO_BATCH) is None


def test_the_command_line_names_the_key(tmp_path):
    proc = run_cli(["recipe=grpo_gsm8k_cpu", "grpo.micro_batch_size=big", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: grpo.micro_batch_size: expected an integer or one of ['auto'], got 'big'")
