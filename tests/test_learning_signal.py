"""A GRPO run whose every update had grad_norm 0 (equal rewards in every group: a random-init model earning 0
everywhere) ended ok and said nothing; only the benchmark script recipe_runs.py printed a NOTE."""

from __future__ import annotations

import logging

from framework.rl.learning_signal import STREAK, ZeroGradientWatch

TIED = {"grad_norm": 0.0, "zero_std_group_fraction": 1.0}


def feed(rows: list[dict], first: int = 1, last: int | None = None) -> ZeroGradientWatch:
    watch = ZeroGradientWatch()
    for step, row in enumerate(rows, first):
        watch.observe(step, row, last or first + len(rows) - 1)
    return watch


def test_every_step_at_grad_norm_0_is_one_warning_naming_why_and_what_to_check(caplog):
    with caplog.at_level(logging.WARNING):
        watch = feed([TIED] * 4)
        assert not caplog.records  # fewer steps than STREAK: nothing mid-run
        warnings = watch.warnings()
    assert warnings == [
        "grpo: grad_norm 0 at every step of this run (steps 1-4), the model learned nothing: every group's rewards "
        "were equal (zero_std_group_fraction 1), no advantage; check the rewards (grpo.rewards), the data, the "
        "sampling (grpo.temperature, top_p) and that the model can earn one (a random-init model earns none)"]
    assert [r.getMessage() for r in caplog.records] == warnings  # in the log once, at the end
    assert watch.metrics() == {"zero_grad_norm_steps": 4}


def test_one_step_with_a_gradient_is_no_warning_and_a_resumed_run_names_its_own_steps():
    assert feed([TIED, TIED, {"grad_norm": 0.3, "zero_std_group_fraction": 0.75}, TIED]).warnings() == []
    assert feed([]).warnings() == [] and feed([{"loss": 0.0}]).warnings() == []  # no grad_norm: no claim
    assert "(step 7)," in feed([TIED], first=7).warnings()[0]


def test_grad_norm_0_with_unequal_rewards_does_not_blame_the_rewards():
    line = feed([TIED, {"grad_norm": 0.0, "zero_std_group_fraction": 0.5}]).warnings()[0]
    assert "though some groups' rewards differed" in line and "random-init" not in line


def test_a_streak_is_said_once_mid_run_and_not_when_it_ends_with_the_run(caplog):
    with caplog.at_level(logging.WARNING):
        feed(([TIED] * (2 * STREAK) + [{"grad_norm": 1.0}]) * 2, last=100)
    assert len(caplog.records) == 1  # one line, though the zero steps ran on
    said = f"grpo: grad_norm 0 at the last {STREAK} steps (steps 1-{STREAK}), the model learns nothing: every group's"
    assert caplog.records[0].getMessage().startswith(said)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        feed([TIED] * STREAK)  # its last step: the end's warning says it
    assert not caplog.records
