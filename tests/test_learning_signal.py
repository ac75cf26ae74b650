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


def test_numpys_scalars_count_and_a_bool_does_not():
    """A float32 grad_norm (what jax/numpy give before float()) was no number to the watch: never a warning."""
    import numpy as np

    assert feed([{"grad_norm": np.float32(0), "zero_std_group_fraction": np.float64(1)}] * 2).metrics() == {
        "zero_grad_norm_steps": 2}
    assert feed([{"grad_norm": False}]).warnings() == []


def test_a_resume_carries_the_count_the_streak_and_the_claim(caplog):
    """Resumed at step 2 of 4, all at grad_norm 0: the warning said `(steps 3-4)` and zero_grad_norm_steps 2 beside
    steps_completed 4; a run whose first steps learned was told `the model learned nothing` after the resume."""
    straight = feed([TIED] * 4)
    before = feed([TIED] * 2, last=4)
    after = ZeroGradientWatch()
    after.restore(before.state_dict(), 2)
    for step in (3, 4):
        after.observe(step, TIED, 4)
    assert after.warnings() == straight.warnings() and after.metrics() == straight.metrics() == {
        "zero_grad_norm_steps": 4}
    learned = feed([{"grad_norm": 0.5}, TIED], last=4)
    resumed = ZeroGradientWatch()
    resumed.restore(learned.state_dict(), 2)
    resumed.observe(3, TIED, 4)
    assert resumed.warnings() == [] and resumed.metrics() == {"zero_grad_norm_steps": 2}
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # a streak over the resume is said once, with its first step
        half = feed([TIED] * (STREAK // 2), last=100)
        rest = ZeroGradientWatch()
        rest.restore(half.state_dict(), STREAK // 2)
        for step in range(STREAK // 2 + 1, 2 * STREAK):
            rest.observe(step, TIED, 100)
    said = f"grpo: grad_norm 0 at the last {STREAK} steps (steps 1-{STREAK})"
    assert [r.getMessage()[:len(said)] for r in caplog.records] == [said]


def test_a_checkpoint_without_the_count_makes_no_claim_about_the_steps_before():
    for state in (None, {"zero": 2}, {"first": "1", "last": 2, "observed": 2, "zero": 2, "streak_from": 1,
                                       "streak": 2, "said": False, "tied": True}, [1, 2]):
        watch = ZeroGradientWatch()
        watch.restore(state, 40)
        for step in (41, 42):
            watch.observe(step, TIED, 42)
        assert watch.metrics() == {}  # this process's 2 would read as the run's
        assert watch.warnings()[0].startswith(
            "grpo: grad_norm 0 at every step since the resume from step 40 (steps 41-42; its checkpoint kept no count "
            "of the steps before), those steps learned nothing: every group's rewards were equal")
