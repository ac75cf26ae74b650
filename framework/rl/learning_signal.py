"""Steps that learned nothing: a group-sampled RL run (GRPO) whose updates all had grad_norm 0.

When every completion of every group earns the same reward (a random-init model scores 0 everywhere), every
advantage is 0, and with no KL term (or a policy still equal to its reference) nothing reaches the weights: the
run ends ok and has learned nothing. `ZeroGradientWatch` says so once in the log after STREAK such steps in a row
(while steps remain), and at the end as the run's warning when every step of this run had grad_norm 0.
"""

from __future__ import annotations

import logging
import numbers

log = logging.getLogger(__name__)
STREAK = 20  # steps in a row with grad_norm 0 before the log says so mid-run (once)


class ZeroGradientWatch:
    """Fed each step's metrics row (`grad_norm`, `zero_std_group_fraction`); `task` prefixes the keys it names.
    `state_dict()` goes into each checkpoint and `restore()` takes it back, so a resumed run's count and claim
    cover its steps from the first, not those since the resume."""

    def __init__(self, task: str = "grpo"):
        self.task, self.first, self.last, self.observed, self.zero = task, None, None, 0, 0
        self.streak_from, self.streak, self.said = None, 0, False
        self.tied = True  # every zero step's groups each had one reward for all their completions
        self.resumed_blind = None  # the step a checkpoint without this state resumed from: earlier steps unknown

    def observe(self, step: int, row: dict, last_step: int) -> None:
        norm = row.get("grad_norm")
        if isinstance(norm, bool) or not isinstance(norm, numbers.Real):  # numpy's scalars too
            return
        self.first = step if self.first is None else self.first
        self.last, self.observed = step, self.observed + 1
        if norm != 0:  # NaN too: check_finite stops the run on it
            self.streak = 0
            return
        self.zero += 1
        self.streak_from, self.streak = (step if self.streak == 0 else self.streak_from), self.streak + 1
        self.tied &= row.get("zero_std_group_fraction") == 1
        if self.streak == STREAK and not self.said and step < last_step:
            self.said = True
            log.warning("%s: grad_norm 0 at the last %d steps (%s), the model learns nothing%s; said once",
                        self.task, STREAK, _span(self.streak_from, step), self._why())

    def warnings(self) -> list[str]:
        """The run's warning (also logged) when every step of this run had grad_norm 0; none otherwise."""
        if not self.observed or self.zero < self.observed:
            return []
        if self.resumed_blind is None:
            line = (f"{self.task}: grad_norm 0 at every step of this run ({_span(self.first, self.last)}), the model "
                    f"learned nothing{self._why()}")
        else:  # the steps before the resume are not known: no claim about them
            line = (f"{self.task}: grad_norm 0 at every step since the resume from step {self.resumed_blind} "
                    f"({_span(self.first, self.last)}; its checkpoint kept no count of the steps before), those "
                    f"steps learned nothing{self._why()}")
        log.warning("%s", line)
        return [line]

    def metrics(self) -> dict[str, int]:
        return {} if self.resumed_blind is not None else {"zero_grad_norm_steps": self.zero}  # no undercount

    def state_dict(self) -> dict:
        return {key: getattr(self, key) for key in STATE}

    def restore(self, state, step: int) -> None:
        """Take a checkpoint's state back; one without it (saved before it was kept, or not of this shape): the
        steps up to `step` are unknown, and the claims say so."""
        if not isinstance(state, dict) or set(state) != set(STATE) or not all(
                isinstance(state[key], kind) or (state[key] is None and key in NULLABLE)
                for key, kind in STATE.items()):
            self.resumed_blind = step
            return
        for key in STATE:
            setattr(self, key, state[key])

    def _why(self) -> str:
        if self.tied:
            return (f": every group's rewards were equal (zero_std_group_fraction 1), no advantage; check the "
                    f"rewards ({self.task}.rewards), the data, the sampling ({self.task}.temperature, top_p) and "
                    f"that the model can earn one (a random-init model earns none)")
        return (", though some groups' rewards differed (equal rewards are the usual cause); check the loss, "
                "advantages and clip_fraction in metrics.jsonl")


# the watch's state in a checkpoint, and each value's type (the first three null before any step)
STATE = {"first": int, "last": int, "streak_from": int, "observed": int, "zero": int, "streak": int, "said": bool,
         "tied": bool}
NULLABLE = ("first", "last", "streak_from")


def _span(first: int, last: int) -> str:
    return f"steps {first}-{last}" if last != first else f"step {first}"
