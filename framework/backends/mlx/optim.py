"""AdamW from mlx.optimizers with the task's schedule and global-norm clipping.

The schedule is transformers' (what TRL on backend torch uses): the learning rate of the k-th
optimizer step (k from 0) is peak * f(k), f rising linearly from 0 over warmup_steps, then
constant, cosine or linear down to min_lr_ratio at the last step. mlx's Optimizer evaluates the
schedule at its step count before incrementing it, which is the same k. Bias correction is on
(torch.optim.AdamW), and weight decay is decoupled: p <- p * (1 - lr * wd), as in torch.
"""

from __future__ import annotations

import math
from functools import partial

import mlx.core as mx
import mlx.optimizers as optim
from mlx.utils import tree_flatten, tree_map

from framework.tasks.common import OptimizerConfig


def lr_factor(opt: OptimizerConfig, total_steps: int):
    """k -> f(k) as an mlx function (traceable inside mx.compile)."""
    warmup, floor = opt.warmup_steps, opt.min_lr_ratio
    decay_steps = max(1, total_steps - warmup)

    def factor(step):
        k = mx.array(step, mx.float32)
        warm = k / max(1, warmup)
        progress = mx.clip((k - warmup) / decay_steps, 0.0, 1.0)
        if opt.schedule == "cosine":
            after = floor + (1 - floor) * 0.5 * (1 + mx.cos(math.pi * progress))
        elif opt.schedule == "linear":
            after = floor + (1 - floor) * (1 - progress)
        else:
            after = mx.array(1.0)
        return mx.where(k < warmup, warm, after)

    return factor


def make_optimizer(opt: OptimizerConfig, total_steps: int) -> optim.AdamW:
    factor = lr_factor(opt, total_steps)
    return optim.AdamW(learning_rate=lambda step: opt.learning_rate * factor(step), betas=[opt.b1, opt.b2],
                       eps=opt.eps, weight_decay=opt.weight_decay, bias_correction=True)


def clip(grads, max_norm: float):
    """(grads scaled to global norm <= max_norm, the norm before); max_norm 0 = no clipping."""
    if max_norm > 0:
        return optim.clip_grad_norm(grads, max_norm)
    norm = mx.sqrt(sum(mx.sum(mx.square(g.astype(mx.float32))) for _, g in tree_flatten(grads)))
    return grads, norm


def make_update(model, optimizer: optim.Optimizer, max_grad_norm: float):
    """A compiled `update(summed_grads, 1 / weight) -> grad norm`: average, clip, AdamW step (in place)."""
    optimizer.init(model.trainable_parameters())
    state = [model.state, optimizer.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def update(grads, inverse_weight):
        grads, norm = clip(tree_map(lambda g: g * inverse_weight, grads), max_grad_norm)
        optimizer.update(model, grads)
        return norm

    return update
