"""Steps that learned nothing: a group-sampled RL run (GRPO) whose updates all had grad_norm 0.

When every completion of every group earns the same reward (a random-init model scores 0 everywhere), every
advantage is 0, and with no KL term (or a policy still equal to its reference) nothing reaches the weights: the
run ends ok and has learned nothing. `ZeroGradientWatch` says so once in the log after STREAK such steps in a row
(while steps remain), and at the end as the run's warning when every step of this run had grad_norm 0.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)
STREAK = 20  # steps in a row with grad_norm 0 before the log says so mid-run (once)


class ZeroGradientWatch:
    """Fed each step's metrics row (`grad_norm`, `zero_std_group_fraction`); `task` prefixes the keys it names."""

    def __init__(self, task: str = "grpo"):
        self.task, self.steps, self.zero_steps, self.streak, self.said = task, [], [], [], False
        self.tied = True  # every zero step's groups each had one reward for all their completions

    def observe(self, step: int, row: dict, last_step: int) -> None:
        norm = row.get("grad_norm")
        if not isinstance(norm, (int, float)):
            return
        self.steps.append(step)
        if norm != 0:
            self.streak = []
            return
        self.zero_steps.append(step)
        self.streak.append(step)
        self.tied &= row.get("zero_std_group_fraction") == 1
        if len(self.streak) == STREAK and not self.said and step < last_step:
            self.said = True
            log.warning("%s: grad_norm 0 at the last %d steps (%s), the model learns nothing%s; said once",
                        self.task, STREAK, _span(self.streak), self._why())

    def warnings(self) -> list[str]:
        """The run's warning (also logged) when every step of this run had grad_norm 0; none otherwise."""
        if not self.steps or len(self.zero_steps) < len(self.steps):
            return []
        line = (f"{self.task}: grad_norm 0 at every step of this run ({_span(self.steps)}), the model learned "
                f"nothing{self._why()}")
        log.warning("%s", line)
        return [line]

    def metrics(self) -> dict[str, int]:
        return {"zero_grad_norm_steps": len(self.zero_steps)}

    def _why(self) -> str:
        if self.tied:
            return (f": every group's rewards were equal (zero_std_group_fraction 1), no advantage; check the "
                    f"rewards ({self.task}.rewards), the data, the sampling ({self.task}.temperature, top_p) and "
                    f"that the model can earn one (a random-init model earns none)")
        return (", though some groups' rewards differed (equal rewards are the usual cause); check the loss, "
                "advantages and clip_fraction in metrics.jsonl")


def _span(steps: list[int]) -> str:
    return f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}"
