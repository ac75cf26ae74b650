"""Log-probs, the SFT loss and the DPO losses in MLX, with TRL 1.16's definitions.

TRL DPOTrainer (trl/trainer/dpo_trainer.py, `_compute_loss`), with d = (logp_c - ref_c) - (logp_r - ref_r)
summed over completion tokens:
    sigmoid  -(1 - ls) logsigmoid(beta d) - ls logsigmoid(-beta d)   (ls = 0: TRL's sigmoid; ls > 0: cDPO)
    hinge    relu(1 - beta d)
    ipo      (d_avg - 1 / (2 beta))^2, each log-ratio divided by its completion's token count
    robust   (-(1 - ls) logsigmoid(beta d) + ls logsigmoid(-beta d)) / (1 - 2 ls)
rewards are beta * (logp - ref) per completion. TRL 1.16's sigmoid ignores label_smoothing; Crucible's
definition (framework/rl/preference.py on main) is conservative DPO, which TRL < 1.0 computed.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

DPO_LOSSES = ("sigmoid", "ipo", "hinge", "robust")


def token_logps(model, ids: mx.array) -> mx.array:
    """log p(ids[:, t+1] | ids[:, :t+1]) in float32, shape [B, L-1]."""
    logits = model(ids[:, :-1]).astype(mx.float32)
    return -nn.losses.cross_entropy(logits, ids[:, 1:], reduction="none")


def sequence_logps(model, ids: mx.array, mask: mx.array) -> mx.array:
    """Sum of the log-probs of the masked (completion) tokens of each row, [B]."""
    return (token_logps(model, ids) * mask[:, 1:]).sum(axis=-1)


def sft_loss(model, ids: mx.array, mask: mx.array):
    """(summed negative log-likelihood of the masked tokens, their count)."""
    weights = mask[:, 1:].astype(mx.float32)
    return -(token_logps(model, ids) * weights).sum(), weights.sum()


def dpo_losses(chosen_logps, rejected_logps, ref_chosen, ref_rejected, chosen_tokens, rejected_tokens,
               loss_type: str, beta: float, label_smoothing: float):
    """(per-pair loss, chosen rewards, rejected rewards), each [B]."""
    chosen_ratio = chosen_logps - ref_chosen
    rejected_ratio = rejected_logps - ref_rejected
    delta = chosen_ratio - rejected_ratio
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * nn.log_sigmoid(beta * delta) - label_smoothing * nn.log_sigmoid(-beta * delta)
    elif loss_type == "hinge":
        losses = nn.relu(1 - beta * delta)
    elif loss_type == "ipo":
        average = chosen_ratio / mx.maximum(chosen_tokens, 1.0) - rejected_ratio / mx.maximum(rejected_tokens, 1.0)
        losses = (average - 1 / (2 * beta)) ** 2
    elif loss_type == "robust":
        clean = -(1 - label_smoothing) * nn.log_sigmoid(beta * delta)
        flipped = -label_smoothing * nn.log_sigmoid(-beta * delta)
        losses = (clean - flipped) / (1 - 2 * label_smoothing)
    else:
        raise ValueError(f"unknown DPO loss type {loss_type!r}; valid: {', '.join(DPO_LOSSES)}")
    return losses, beta * mx.stop_gradient(chosen_ratio), beta * mx.stop_gradient(rejected_ratio)


def dpo_batch(model, ids, mask, ref_chosen, ref_rejected, loss_type: str, beta: float, label_smoothing: float):
    """(loss summed over the pairs, pairs, chosen reward sum, rejected reward sum, correct count, chosen logp
    sum, rejected logp sum) for one micro-batch laid out [chosen rows; rejected rows]."""
    logps = sequence_logps(model, ids, mask)
    half = ids.shape[0] // 2
    tokens = mask[:, 1:].astype(mx.float32).sum(axis=-1)
    losses, chosen_rewards, rejected_rewards = dpo_losses(
        logps[:half], logps[half:], ref_chosen, ref_rejected, tokens[:half], tokens[half:], loss_type, beta,
        label_smoothing)
    correct = (chosen_rewards > rejected_rewards).astype(mx.float32)
    return (losses.sum(), mx.array(float(half)), chosen_rewards.sum(), rejected_rewards.sum(), correct.sum(),
            mx.stop_gradient(logps[:half]).sum(), mx.stop_gradient(logps[half:]).sum())
