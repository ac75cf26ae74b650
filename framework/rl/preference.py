"""Preference-optimisation (DPO family) losses: pure numpy reference functions, backend-neutral.

Every loss takes the summed completion log-probs of a batch of B pairs, each [B] float:
policy_chosen_logps, policy_rejected_logps (the model being trained) and ref_chosen_logps,
ref_rejected_logps (the reference), and returns (losses [B], chosen_rewards [B], rejected_rewards [B])
with the implicit rewards beta * (policy - ref) log-ratio of each completion (TRL's `rewards/chosen`,
`rewards/rejected`; the training loss is losses.mean()). With
    delta = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
the losses, as TRL 1.16 DPOTrainer computes them (trl/trainer/dpo_trainer.py, `_compute_loss`,
f_divergence_type="reverse_kl"), are registered by name (`@register_preference_loss`); a backend looks
its `dpo.loss_type` up with `preference_loss(name)` and checks its own loss against these.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from framework.core.errors import ConfigError

PreferenceLoss = Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]
PREFERENCE_LOSSES: dict[str, PreferenceLoss] = {}


def register_preference_loss(name: str) -> Callable[[PreferenceLoss], PreferenceLoss]:
    def register(fn: PreferenceLoss) -> PreferenceLoss:
        if name in PREFERENCE_LOSSES:
            raise ValueError(f"preference loss {name!r} is registered twice")
        PREFERENCE_LOSSES[name] = fn
        return fn

    return register


def preference_loss(name: str, key: str = "dpo.loss_type") -> PreferenceLoss:
    """The registered loss `name`, or a ConfigError naming `key` and the valid names."""
    if name not in PREFERENCE_LOSSES:
        raise ConfigError(f"{key}: unknown preference loss {name!r}; valid: {', '.join(sorted(PREFERENCE_LOSSES))}")
    return PREFERENCE_LOSSES[name]


def _log_ratios(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps):
    arrays = [np.asarray(a, dtype=np.float64) for a in
              (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)]
    return arrays[0] - arrays[2], arrays[1] - arrays[3]


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -x)


def _rewards(beta: float, chosen: np.ndarray, rejected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return beta * chosen, beta * rejected


@register_preference_loss("sigmoid")
def sigmoid_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *,
                 beta: float, label_smoothing: float = 0.0, **_unused):
    """DPO (Rafailov et al. 2023): -(1 - eps) log sigmoid(beta delta) - eps log sigmoid(-beta delta).

    eps = label_smoothing = 0 is TRL `loss_type="sigmoid"` exactly. eps > 0 is conservative DPO (cDPO,
    labels flipped with probability eps), what TRL < 1.0 computed for sigmoid with label_smoothing;
    TRL 1.16's sigmoid ignores label_smoothing (its `aot` and `robust` use it), so a backend on TRL
    1.16 must apply eps itself to match this.
    """
    chosen, rejected = _log_ratios(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    logits = beta * (chosen - rejected)
    losses = -(1 - label_smoothing) * _log_sigmoid(logits) - label_smoothing * _log_sigmoid(-logits)
    return (losses, *_rewards(beta, chosen, rejected))


@register_preference_loss("hinge")
def hinge_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *,
               beta: float, **_unused):
    """SLiC (Zhao et al. 2023): relu(1 - beta delta). TRL `loss_type="hinge"`."""
    chosen, rejected = _log_ratios(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    losses = np.maximum(0.0, 1.0 - beta * (chosen - rejected))
    return (losses, *_rewards(beta, chosen, rejected))


@register_preference_loss("ipo")
def ipo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *,
             beta: float, chosen_tokens=1.0, rejected_tokens=1.0, **_unused):
    """IPO (Azar et al. 2023, eq. 17): (delta_avg - 1 / (2 beta))^2 with each log-ratio divided by its
    completion's token count, delta_avg = chosen/chosen_tokens - rejected/rejected_tokens ([B] or
    scalars; at least 1). TRL `loss_type="ipo"` (which normalises by the completion mask's length)."""
    chosen, rejected = _log_ratios(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    chosen_avg = chosen / np.maximum(np.asarray(chosen_tokens, dtype=np.float64), 1.0)
    rejected_avg = rejected / np.maximum(np.asarray(rejected_tokens, dtype=np.float64), 1.0)
    losses = (chosen_avg - rejected_avg - 1.0 / (2.0 * beta)) ** 2
    return (losses, *_rewards(beta, chosen, rejected))


@register_preference_loss("robust")
def robust_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *,
                beta: float, label_smoothing: float = 0.0, **_unused):
    """Robust DPO (Chowdhury et al. 2024), unbiased under label noise eps = label_smoothing in [0, 0.5):
    (-(1 - eps) log sigmoid(beta delta) + eps log sigmoid(-beta delta)) / (1 - 2 eps). TRL `loss_type="robust"`."""
    if not 0.0 <= label_smoothing < 0.5:
        raise ConfigError(f"dpo.label_smoothing: {label_smoothing} must be in [0, 0.5) for the robust loss")
    chosen, rejected = _log_ratios(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    logits = beta * (chosen - rejected)
    clean = -(1 - label_smoothing) * _log_sigmoid(logits)
    flipped = -label_smoothing * _log_sigmoid(-logits)
    losses = (clean - flipped) / (1 - 2 * label_smoothing)
    return (losses, *_rewards(beta, chosen, rejected))
