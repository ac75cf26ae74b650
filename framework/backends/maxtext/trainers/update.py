"""The policy update: completion log-probs, the GRPO loss over micro-batches, optax AdamW.

One batch of rollouts is split into micro-batches. Each PPO epoch accumulates the gradient of the
full-batch loss over all micro-batches, then takes one optimizer step, so `micro_batch_size` changes
memory use, not the maths. Old log-probs (ppo_epochs > 1) and reference log-probs (beta > 0) are
forward passes taken before the first update.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from framework.tasks.common import OptimizerConfig
from framework.tasks.grpo import GRPOTask
from framework.backends.maxtext.grpo.loss import grpo_loss, masked_mean
from framework.backends.maxtext.models.rope import positions_from_mask
from framework.backends.maxtext.models.transformer import LOGITS_AXES, Transformer
from framework.backends.maxtext.models.vocab_projection import head_kernel, target_log_probs
from framework.backends.maxtext.sharding import LogicalRules, constrain, put
from framework.core.errors import DataError

Array = jax.Array
Batch = dict[str, Array]
BATCH_AXES = ("activation_batch", None)


def completion_log_probs(model: Transformer, params: Any, input_ids: Array, attention_mask: Array,
                         completion_length: int, temperature: float, chunk_size: int) -> tuple[Array, Array]:
    """Log-prob of each completion token and the policy's entropy there, both float32 [B, T].

    `input_ids` is [B, P + T]: prompts, then completions. Only the T completion positions go
    through the vocabulary projection, `chunk_size` positions at a time and recomputed in the
    backward pass, so at most [B, chunk_size, V] logits are alive. With completion_length = L - 1 it is
    the log-prob of every next token of the sequence.
    """
    positions = positions_from_mask(attention_mask)
    hidden, _ = model.apply({"params": params}, input_ids, positions, attention_mask,
                            method=Transformer.hidden_states)
    hidden = hidden[:, -completion_length - 1:-1]  # the position before each completion token predicts it
    layout = functools.partial(constrain, logical_axes=LOGITS_AXES, mesh=model.mesh, rules=model.rules)
    return chunked_log_probs(hidden, head_kernel(model.config, params), input_ids[:, -completion_length:],
                             temperature, chunk_size, layout)


def chunked_log_probs(hidden: Array, kernel: Array, targets: Array, temperature: float, chunk_size: int,
                      layout: Callable[[Array], Array]) -> tuple[Array, Array]:
    """hidden [B, T, H], kernel [H, V], targets [B, T] -> (log-probs, entropy), float32 [B, T]: through the
    vocabulary projection `chunk_size` positions at a time, recomputed in the backward pass, so at most
    [B, chunk_size, V] logits are alive. `layout` constrains the logits' sharding."""
    batch, length = targets.shape
    chunk = max(1, min(chunk_size, length))
    padded = -(-length // chunk) * chunk
    hidden = jnp.pad(hidden, ((0, 0), (0, padded - length), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, padded - length)))

    def chunk_stats(hidden_chunk: Array, target_chunk: Array) -> tuple[Array, Array]:
        # The backward recomputes the chunk's logits (models/vocab_projection.py): at most one chunk's are alive.
        log_probs, entropy = target_log_probs(hidden_chunk, kernel, target_chunk, temperature, layout)
        return log_probs, jax.lax.stop_gradient(entropy)

    def by_chunk(x: Array) -> Array:
        return x.reshape(batch, padded // chunk, chunk, *x.shape[2:]).swapaxes(0, 1)

    log_probs, entropy = jax.lax.map(lambda args: chunk_stats(*args), (by_chunk(hidden), by_chunk(targets)))

    def unchunk(x: Array) -> Array:
        return x.swapaxes(0, 1).reshape(batch, padded)[:, :length]

    return unchunk(log_probs), unchunk(entropy)


def forward_inputs(batch: Batch) -> Batch:
    """What a log-prob pass reads of a micro-batch: the same pytree whatever else the batch carries (old or
    reference log-probs, advantages), so one compiled program serves every such pass."""
    return {key: batch[key] for key in ("input_ids", "attention_mask", "completion_mask")}


def learning_rate_schedule(cfg: OptimizerConfig, steps: int, updates_per_step: int) -> Callable[[Any], Array]:
    """Learning rate per optimizer update: linear warmup, then constant/cosine/linear decay until `steps`.

    Counted in GRPO steps (update count // updates_per_step), so every PPO epoch of a step uses the
    same rate; warmup reaches the peak at step `warmup_steps` (the first step already learns).
    """
    peak, warmup, floor = cfg.learning_rate, cfg.warmup_steps, cfg.min_lr_ratio

    def schedule(count: Any) -> Array:
        step = jnp.asarray(count, jnp.float32) // updates_per_step
        warm = jnp.minimum(1.0, (step + 1) / warmup) if warmup else 1.0
        progress = jnp.clip((step - warmup) / max(1, steps - warmup), 0.0, 1.0)
        if cfg.schedule == "cosine":
            decay = floor + (1 - floor) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
        elif cfg.schedule == "linear":
            decay = 1.0 - (1 - floor) * progress
        else:
            decay = 1.0
        return peak * warm * jnp.where(step < warmup, 1.0, decay)

    return schedule


def build_optimizer(cfg: OptimizerConfig, schedule: Callable[[Any], Array]) -> optax.GradientTransformation:
    """AdamW (no weight decay on biases and norm scales) after global-norm clipping."""
    def decay_mask(params: Any) -> Any:
        return jax.tree.map(lambda x: x.ndim >= 2, params)

    adamw = optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps, weight_decay=cfg.weight_decay, mask=decay_mask)
    if cfg.max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), adamw)
    return adamw


class PolicyUpdate:
    """Compiled pieces of one GRPO update, and the loop over PPO epochs and micro-batches."""

    def __init__(self, model: Transformer, task: GRPOTask, optimizer: optax.GradientTransformation,
                 param_shapes: Any, param_shardings: Any, mesh: Mesh, rules: LogicalRules | None):
        """param_shapes: ShapeDtypeStructs of the params; param_shardings: their NamedShardings.

        Every compiled function returns params, gradients and optimizer state with fixed shardings
        (the moments like their params), so no step hands the next one a layout that recompiles.
        """
        self.model, self.task, self.optimizer = model, task, optimizer
        self.mesh, self.rules = mesh, rules
        replicated = NamedSharding(mesh, PartitionSpec())
        self.opt_state_shardings = optax.tree_map_params(
            optimizer, lambda _, sharding: sharding, jax.eval_shape(optimizer.init, param_shapes), param_shardings,
            transform_non_params=lambda _: replicated)
        self.init_opt_state = jax.jit(optimizer.init, out_shardings=self.opt_state_shardings)
        self.log_probs = jax.jit(self._log_probs)
        self.zero_grads = jax.jit(lambda params: jax.tree.map(jnp.zeros_like, params), out_shardings=param_shardings)
        self.accumulate = jax.jit(self._accumulate, donate_argnames=("grads",),
                                  out_shardings=(param_shardings, replicated))
        self.apply = jax.jit(self._apply, donate_argnames=("params", "opt_state"),
                             out_shardings=(param_shardings, self.opt_state_shardings, replicated))

    # ---- compiled functions --------------------------------------------------------------------

    def _log_probs(self, params: Any, batch: Batch) -> Array:
        log_probs, _ = completion_log_probs(self.model, params, batch["input_ids"], batch["attention_mask"],
                                            batch["completion_mask"].shape[1], self.task.temperature,
                                            self.task.logprob_chunk_size)
        return log_probs

    def _loss(self, params: Any, batch: Batch, num_tokens: Array, weight: Array) -> tuple[Array, dict]:
        task, mask = self.task, batch["completion_mask"]
        log_probs, entropy = completion_log_probs(self.model, params, batch["input_ids"], batch["attention_mask"],
                                                  mask.shape[1], task.temperature, task.logprob_chunk_size)
        loss, metrics = grpo_loss(
            log_probs, batch.get("old_log_probs"), batch["advantages"], mask, batch.get("ref_log_probs"),
            clip_low=task.clip_low, clip_high=task.clip_high, beta=task.beta,
            kl_importance_correction=task.kl_importance_correction, normalization=task.loss_normalization,
            max_completion_length=mask.shape[1], num_tokens_in_batch=num_tokens)
        metrics["entropy"] = masked_mean(entropy, mask)
        metrics["policy_loss"] = metrics["policy_loss"] * weight  # summed over micro-batches, like the loss
        return loss * weight, metrics

    def _accumulate(self, params: Any, grads: Any, batch: Batch, num_tokens: Array, weight: Array) -> tuple[Any, dict]:
        (loss, metrics), step_grads = jax.value_and_grad(self._loss, has_aux=True)(params, batch, num_tokens, weight)
        metrics["loss"] = loss
        return jax.tree.map(jnp.add, grads, step_grads), metrics

    def _apply(self, params: Any, opt_state: Any, grads: Any) -> tuple[Any, Any, Array]:
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, optax.global_norm(grads)

    # ---- host loop -----------------------------------------------------------------------------

    def micro_batches(self, arrays: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Host arrays [N, ...] split into micro-batches of micro_batch_size rows."""
        check_one_run_per_row(arrays["attention_mask"])
        size = self.task.micro_batch_size
        count = len(arrays["input_ids"]) // size
        return [{name: value[i * size:(i + 1) * size] for name, value in arrays.items()} for i in range(count)]

    def to_device(self, batch: dict[str, np.ndarray]) -> Batch:
        return {name: put(value, self.mesh, self.rules, BATCH_AXES[:value.ndim]) for name, value in batch.items()}

    def run(self, params: Any, opt_state: Any, ref_params: Any | None, arrays: dict[str, np.ndarray]
            ) -> tuple[Any, Any, dict[str, float]]:
        """ppo_epochs optimizer updates on one batch of rollouts; returns new params, state and metrics."""
        params, opt_state, host_metrics = self.start(params, opt_state, ref_params, arrays)
        return params, opt_state, host_metrics()

    def start(self, params: Any, opt_state: Any, ref_params: Any | None, arrays: dict[str, np.ndarray],
              dispatched: Callable[[], None] | None = None) -> tuple[Any, Any, Callable[[], dict[str, float]]]:
        """`run` without waiting: the new params and state (still computing on the devices) and a function that
        waits for the metrics, so the host can do other work (the next batch's rewards) while the update runs.
        `dispatched` is called once, as soon as the update's first program is dispatched: a later dispatch can hold
        the host (8 micro-batches of Qwen3-8B on 2 H200s: a rollout started after `start` returned began 3.1 s into
        a 3.2 s update), so work that must overlap the update (the next rollout) starts there."""
        first = _once(dispatched)
        host_batches = self.micro_batches(arrays)
        tokens = [float(b["completion_mask"].sum()) for b in host_batches]
        batches = [self.to_device(b) for b in host_batches]
        # One update per batch on-policy: the policy is still the sampler's, old = current. Off-policy
        # (grpo.rollout_lag=1) the sampler's behaviour log-probs come in the arrays.
        if self.task.ppo_epochs > 1 and "old_log_probs" not in arrays:
            for batch in batches:
                batch["old_log_probs"] = self.log_probs(params, forward_inputs(batch))
                first()
        if ref_params is not None:
            for batch in batches:
                batch["ref_log_probs"] = self.log_probs(ref_params, forward_inputs(batch))
                first()
        num_tokens = np.float32(arrays["completion_mask"].sum())  # numpy: no eager op to compile in a step
        weight = np.float32(1.0 if self.task.loss_normalization == "token" else 1.0 / len(batches))
        metrics, grad_norms = [], []
        for _ in range(self.task.ppo_epochs):
            grads = self.zero_grads(params)
            for batch in batches:
                grads, batch_metrics = self.accumulate(params, grads, batch, num_tokens, weight)
                first()
                metrics.append(batch_metrics)
            params, opt_state, grad_norm = self.apply(params, opt_state, grads)
            grad_norms.append(grad_norm)

        def host_metrics() -> dict[str, float]:
            on_host, norms = jax.device_get((metrics, grad_norms))
            return summarize(on_host, tokens * self.task.ppo_epochs, len(batches), norms)
        return params, opt_state, host_metrics


def _once(callback: Callable[[], None] | None) -> Callable[[], None]:
    """`callback` on the first call, nothing after (nor when it is None)."""
    pending = [callback] if callback is not None else []

    def call() -> None:
        if pending:
            pending.pop()()
    return call


def check_one_run_per_row(attention_mask: np.ndarray) -> None:
    """The packed attention (models/transformer.py) needs each row's real tokens in one run: padding on the
    left and/or right, none inside. A row with none or with a hole would be attended wrongly, silently."""
    mask = np.asarray(attention_mask) != 0
    runs = (mask & ~np.pad(mask, ((0, 0), (1, 0)))[:, :-1]).sum(axis=1)  # 0 -> 1 transitions per row
    if (runs != 1).any():
        row = int(np.argmax(runs != 1))
        raise DataError(f"grpo update: row {row} of the batch has {int(runs[row])} runs of real tokens in its "
                        f"attention mask; the packed attention needs exactly one (padding only before and after)")


def summarize(metrics: list[dict], tokens: list[float], batches_per_epoch: int, grad_norms: list) -> dict[str, float]:
    """Token-weighted means over micro-batches and epochs; losses are summed within an epoch
    (each micro-batch holds its share of the full-batch loss), then averaged over epochs."""
    weights = np.asarray(tokens) / max(sum(tokens), 1.0)
    out = {}
    for name in metrics[0]:
        values = np.asarray([m[name] for m in metrics], np.float64)
        if name in ("loss", "policy_loss"):
            out[name] = float(values.reshape(-1, batches_per_epoch).sum(axis=1).mean())
        elif name == "ratio_min":
            out[name] = float(values.min())
        elif name == "ratio_max":
            out[name] = float(values.max())
        else:
            out[name] = float((values * weights).sum())
    out["grad_norm"] = float(np.mean(grad_norms))
    return out
