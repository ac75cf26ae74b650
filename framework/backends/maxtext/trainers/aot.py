"""Ahead-of-time compiles of the first step's programs, in background threads, from abstract shapes.

The first step used to trace, lower and compile the rollout's sampling program and the update's programs one
after the other, after the weights had loaded. Compiling needs only shapes, dtypes and shardings, so init
starts these compiles as soon as the architecture and the update plan are known: they run while the model is
built or downloaded, the tokenizer loads and the weights are read, and side by side (XLA's compile releases the
GIL). A step then
calls the compiled executables directly (`Precompiled`): nothing is traced or compiled again. A call whose
arguments do not match the executable (e.g. evaluation's batch size) goes through the plain `jax.jit`.

No device buffer is allocated while XLA autotunes in the background: init starts the compiles before anything
lasting is on the devices, reads the weights into host memory meanwhile, and places them only once every
compile has ended (`wait_all`; trainers/startup.py). On an H100 (2026-11-27), weights placed beside the
autotuner's scratch buffers fragmented the allocator's pool so that the update's one 52 GiB temporary no
longer fit.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Callable

log = logging.getLogger(__name__)


class AheadOfTime:
    """`submit(name, jitted, *abstract_args)` compiles in a worker thread; `wrap(name, jitted)` is the callable
    a step uses. `close()` cancels what has not started and waits for running compiles (they cannot be
    interrupted), so no thread outlives a failing run."""

    def __init__(self, workers: int):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aot-compile")
        self._futures: dict[str, Future] = {}
        self._statics: dict[str, _Statics] = {}
        self.wrapped: dict[str, Precompiled] = {}
        self._lock = threading.Lock()
        self.started = time.perf_counter()
        self.busy_s = 0.0  # summed over programs: compile seconds spent in the background
        self.finished_at = self.started
        self.barrier_s = 0.0  # waited in wait_all

    def submit(self, name: str, jitted: Any, *args: Any, static: tuple[int | str, ...] = (), **kwargs: Any) -> None:
        """`static`: the positions and names of jitted's static arguments (the executable takes the others)."""
        self._statics[name] = _Statics(static, args, kwargs)
        self._futures[name] = self._pool.submit(self._compile, name, jitted, args, kwargs)

    def _compile(self, name: str, jitted: Any, args: tuple, kwargs: dict) -> Any:
        began = time.perf_counter()
        compiled = jitted.lower(*args, **kwargs).compile()
        ended = time.perf_counter()
        with self._lock:
            self.busy_s += ended - began
            self.finished_at = max(self.finished_at, ended)
        log.info("aot: compiled %s in %.2f s", name, ended - began)
        return compiled

    def wrap(self, name: str, jitted: Any) -> Callable:
        future = self._futures.get(name)
        if future is None:
            return jitted
        self.wrapped[name] = Precompiled(name, jitted, future, self._statics[name])
        return self.wrapped[name]

    def wait_all(self) -> None:
        """Block until every compile has finished or failed (each program's call raises its own error)."""
        began = time.perf_counter()
        wait(self._futures.values())
        self.barrier_s += time.perf_counter() - began

    def waited_s(self) -> float:
        """Seconds the steps spent waiting for compiles still running."""
        return self.barrier_s + sum(p.waited_s for p in self.wrapped.values())

    def fallbacks(self) -> int:
        return sum(p.fallbacks for p in self.wrapped.values())

    def metrics(self) -> dict[str, float | str]:
        """Compile seconds in the background, from the first submit to the last compile's end, what the steps
        waited, the fallbacks, and the programs compiled but never run (a resume does not initialise AdamW)."""
        unused = [name for name in self._futures if name not in self.wrapped or not self.wrapped[name].taken]
        return {"aot_compile_s": self.busy_s, "aot_wall_s": self.finished_at - self.started,
                "aot_wait_s": self.waited_s(), "aot_fallbacks": self.fallbacks(), "aot_unused": ",".join(unused)}

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class _Statics:
    """Splits a call into its static values (which must equal those compiled for) and the executable's args."""

    def __init__(self, static: tuple[int | str, ...], args: tuple, kwargs: dict):
        self.static = static
        self.values = self.split(args, kwargs)[0]

    def split(self, args: tuple, kwargs: dict) -> tuple[tuple, tuple, dict]:
        values = tuple(args[k] if isinstance(k, int) else kwargs.get(k) for k in self.static)
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static)
        return values, dynamic, {k: v for k, v in kwargs.items() if k not in self.static}


class Precompiled:
    """A jitted function whose executable for the expected arguments was compiled ahead of time."""

    def __init__(self, name: str, jitted: Any, future: Future, statics: _Statics):
        self.name, self.jitted, self._future, self._statics = name, jitted, future, statics
        self.fallbacks = 0  # calls the executable did not take: they went through jax.jit
        self.taken = 0  # calls it did
        self.waited_s = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        failure = self._future.exception()  # waits for the compile
        self.waited_s += time.perf_counter() - began
        values, dynamic, dynamic_kwargs = self._statics.split(args, kwargs)
        if failure is not None:  # through jax.jit: a program's own error is raised there as it always was, a
            reason = f"its background compile failed: {str(failure).splitlines()[0][:200]}"  # background-only one not
        elif values == self._statics.values:
            compiled = self._future.result()
            try:
                out = compiled(*dynamic, **dynamic_kwargs)
                self.taken += 1
                return out
            except (TypeError, ValueError) as mismatch:  # checked before anything runs or is donated
                reason = str(mismatch).splitlines()[0][:200]
        else:
            reason = "other static arguments"
        if self.fallbacks == 0:
            log.info("aot: %s runs through jax.jit (%s)", self.name, reason)
        self.fallbacks += 1
        return self.jitted(*args, **kwargs)


def start_first_step(update: Any, placements: list, boxed: Any, shardings: Any, task: Any,
                     sampling: Any) -> AheadOfTime:
    """Start compiling the programs of one GRPO step for the shapes the step will give them, two at a time:
    the update's gradient accumulation (the largest) and the rollout's sampling program (the longest; statics:
    the sampler's model, as Sampler clones the update's onto the rollout mesh, and sampling), then the small ones.
    None needs the tokenizer: the EOS ids (padded to the sampler's EOS slots) and the pad id are arguments, so
    init waits for the tokenizer after this; `finish_first_step` then submits what needs the step's scalars and
    makes the sampler and the update call the executables.

    placements: the rollout groups' (one sampling program each: "rollout", then "rollout_1", ... for the further
    groups of grpo.rollout_lag >= 2, compiled after the small programs).
    boxed, shardings: the update's params as abstract (boxed) arrays and their shardings. Every other shape follows
    from the task: prompts are left-padded to exactly max_prompt_tokens, completions to max_new_tokens
    (trainers/rollout.py).
    """
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.trainers.update import forward_inputs

    aot = AheadOfTime(workers=2)
    from flax import linen as nn

    aot.params = params = jax.tree.map(
        lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), nn.unbox(boxed), shardings)
    prompt, new = task.max_prompt_tokens, task.max_new_tokens
    rows, mesh, rules = task.micro_batch_size, update.mesh, update.rules
    batch = {"input_ids": _array((rows, prompt + new), jnp.int32, mesh, rules),
             "attention_mask": _array((rows, prompt + new), jnp.int32, mesh, rules),
             "completion_mask": _array((rows, new), jnp.float32, mesh, rules),
             "advantages": _array((rows,), jnp.float32, mesh, rules)}
    behaviour = task.rollout_lag > 0  # off-policy: old log-probs come from the sampler (trainers/pipeline.py)
    log_probs_batch = forward_inputs(batch)
    if task.ppo_epochs > 1 or behaviour:
        batch["old_log_probs"] = _array((rows, new), jnp.float32, mesh, rules)
    if task.beta > 0:
        batch["ref_log_probs"] = _array((rows, new), jnp.float32, mesh, rules)
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    aot.submit("accumulate", update.accumulate, params, params, batch, scalar, scalar)
    _submit_rollout(aot, rollout_name(0), update, placements[0], task, sampling)
    aot.submit("zero_grads", update.zero_grads, params)
    if (task.ppo_epochs > 1 and not behaviour) or task.beta > 0:  # old/reference log-probs before the update
        aot.submit("log_probs", update.log_probs, params, log_probs_batch)
    for group, placement in enumerate(placements[1:], start=1):
        _submit_rollout(aot, rollout_name(group), update, placement, task, sampling)
    return aot


def rollout_name(group: int) -> str:
    return "rollout" if group == 0 else f"rollout_{group}"


def _submit_rollout(aot: AheadOfTime, name: str, update: Any, placement: Any, task: Any, sampling: Any) -> None:
    """The sampling program on `placement`'s mesh, for the sampler's model (Sampler clones the update's onto it)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from framework.backends.maxtext.sampler import _EOS_SLOTS, _generate

    params, rules = aot.params, update.rules
    model = update.model.clone(mesh=placement.mesh, rules=rules)
    policy = params if placement.same_as_update else jax.tree.map(
        lambda p, s: jax.ShapeDtypeStruct(p.shape, _rollout_dtype(p.dtype, model), sharding=s),
        params, placement.shardings)
    ids = _array((task.prompts_per_step, task.max_prompt_tokens), jnp.int32, placement.mesh, rules)
    rng = jax.eval_shape(lambda: jax.random.split(jax.random.key(0))[1])  # a key's shape: nothing on a device
    eos = jax.ShapeDtypeStruct((_EOS_SLOTS,), jnp.int32)  # up to _EOS_SLOTS ids (more: through jax.jit)
    aot.submit(name, _generate, model, policy, ids, ids, rng, eos, np.int32(0), sampling=sampling,
               with_log_probs=task.rollout_lag > 0, static=(0, "sampling", "with_log_probs"))


def finish_first_step(aot: AheadOfTime | None, update: Any, samplers: list, scalars: Any) -> None:
    """The rest of start_first_step (none without it): the optimizer step and state initialisation (init runs
    it once the weights are placed), the step's scalars (trainers/startup.py); then every wrap."""
    import jax
    import jax.numpy as jnp

    if aot is None:
        return
    params = aot.params
    opt_state = jax.tree.map(lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding),
                             jax.eval_shape(update.optimizer.init, params), update.opt_state_shardings)
    aot.submit("apply", update.apply, params, opt_state, params)
    aot.submit("init_opt_state", update.init_opt_state, params)
    aot.submit("split_key", scalars.split, jax.eval_shape(lambda: jax.random.key(0)))
    aot.submit("learning_rate", scalars.learning_rate, jax.ShapeDtypeStruct((), jnp.int32))
    scalars.split, scalars.learning_rate = aot.wrap("split_key", scalars.split), aot.wrap("learning_rate",
                                                                                          scalars.learning_rate)
    for group, sampler in enumerate(samplers):
        sampler.program = aot.wrap(rollout_name(group), sampler.program)
    for name in ("zero_grads", "accumulate", "apply", "log_probs", "init_opt_state"):
        setattr(update, name, aot.wrap(name, getattr(update, name)))


def _array(shape: tuple, dtype: Any, mesh: Any, rules: Any) -> Any:
    """A batch array's abstract value, sharded as the step shards it."""
    import jax

    from framework.backends.maxtext.sharding import DEFAULT_RULES, named_sharding
    from framework.backends.maxtext.trainers.update import BATCH_AXES

    sharding = named_sharding(mesh, rules or DEFAULT_RULES, BATCH_AXES[:len(shape)], shape)
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def _rollout_dtype(dtype: Any, model: Any) -> Any:
    """The rollout copy's dtype: floating weights cast to the compute dtype (sharding.resharder)."""
    import jax.numpy as jnp

    return jnp.dtype(model.config.dtype) if jnp.issubdtype(dtype, jnp.floating) else dtype
