"""Ahead-of-time compiles of the first step (trainers/aot.py): the step runs the background-compiled
executables without compiling again, and trains bit for bit as the plain jax.jit path does."""

from __future__ import annotations

import functools
import json

import pytest

from framework.core.loggers import read_metrics
from tests.conftest import run_cli

jax = pytest.importorskip("jax")
jnp = jax.numpy

from framework.backends.maxtext.trainers.aot import AheadOfTime  # noqa: E402


@functools.partial(jax.jit, static_argnames=("scale",), donate_argnums=(0,))
def _scaled_sum(x, y, scale):
    return x * scale + y


def test_precompiled_call_does_not_compile_again_and_falls_back_on_other_arguments():
    aot = AheadOfTime(workers=2)
    shape = jax.ShapeDtypeStruct((4,), jnp.float32)
    aot.submit("scaled_sum", _scaled_sum, shape, shape, scale=3.0, static=("scale",))
    call = aot.wrap("scaled_sum", _scaled_sum)
    out = call(jnp.ones(4), jnp.arange(4.0), scale=3.0)
    assert out.tolist() == [3.0, 4.0, 5.0, 6.0]
    assert _scaled_sum._cache_size() == 0 and call.fallbacks == 0  # the executable ran: jax.jit never compiled
    assert call(jnp.ones(5), jnp.ones(5), scale=3.0).tolist() == [4.0] * 5  # another shape: through jax.jit
    assert call(jnp.ones(4), jnp.ones(4), scale=2.0).tolist() == [3.0] * 4  # another static value: not reused
    assert call.fallbacks == 2 and aot.fallbacks() == 2
    aot.close()


def test_a_background_compile_error_surfaces_at_the_call():
    @jax.jit
    def bad(x):
        raise ValueError("bad program")

    aot = AheadOfTime(workers=1)
    aot.submit("bad", bad, jax.ShapeDtypeStruct((2,), jnp.float32))
    call = aot.wrap("bad", bad)
    with pytest.raises(ValueError, match="bad program"):
        call(jnp.ones(2))
    assert call.fallbacks == 1  # raised by jax.jit's own compile, as without the background path
    aot.close()


def test_a_failure_of_the_background_compile_alone_falls_back_to_jax_jit():
    aot = AheadOfTime(workers=1)
    shape = jax.ShapeDtypeStruct((4,), jnp.float32)
    aot.submit("scaled_sum", _scaled_sum, shape, jnp.zeros(3), scale=3.0, static=("scale",))  # a wrong shape
    call = aot.wrap("scaled_sum", _scaled_sum)
    assert call(jnp.ones(4), jnp.arange(4.0), scale=3.0).tolist() == [3.0, 4.0, 5.0, 6.0]
    assert call.fallbacks == 1
    aot.close()


def test_wait_all_returns_once_every_compile_has_ended_a_failing_one_included():
    """The first step calls wait_all before it allocates anything on a device (trainers/aot.py says why)."""
    @jax.jit
    def bad(x):
        raise ValueError("bad program")

    aot = AheadOfTime(workers=1)  # one worker: the second compile waits for the first
    shape = jax.ShapeDtypeStruct((4,), jnp.float32)
    aot.submit("bad", bad, shape)
    aot.submit("scaled_sum", _scaled_sum, shape, shape, scale=3.0, static=("scale",))
    aot.wait_all()
    assert all(future.done() for future in aot._futures.values())
    assert aot.waited_s() == aot.barrier_s >= 0.0
    aot.close()


RUN = ["recipe=grpo_gsm8k_cpu", "grpo.steps=1", "grpo.eval.every=0", "grpo.checkpoint.every=1",
       "grpo.export_hf=false", "progress=false"]
TIMINGS = ("time_s", "_per_s", "compile", "aot")  # time_s: the logger's wall clock


def _run(tmp_path, name, aot, cache):
    run_dir = tmp_path / name
    proc = run_cli([*RUN, f"backend.adapter.aot_compile={aot}", f"hydra.run.dir={run_dir}"],
                   env={"CRUCIBLE_CACHE": str(cache / name)})  # own JAX cache: each run compiles afresh
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    manifest = json.loads((run_dir / "checkpoints" / "step_1" / "manifest.json").read_text())
    manifest.pop("created", None), manifest.pop("fingerprint", None)  # the config differs (aot_compile)
    return read_metrics(run_dir / "metrics.jsonl"), summary["result"]["metrics"], manifest


@pytest.mark.slow
def test_reference_and_old_log_prob_passes_take_their_executable(tmp_path):
    """beta > 0 and ppo_epochs 2: the old and the reference passes read one pytree (update.forward_inputs)."""
    run_dir = tmp_path / "run"
    proc = run_cli([*RUN, "grpo.beta=0.04", "grpo.ppo_epochs=2", f"hydra.run.dir={run_dir}"],
                   env={"CRUCIBLE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["result"]["metrics"]["aot_fallbacks"] == 0


@pytest.mark.slow
def test_first_step_is_bit_identical_with_and_without_aot_and_compiles_nothing_itself(tmp_path):
    rows_aot, summary_aot, files_aot = _run(tmp_path, "aot", "true", tmp_path / "cache")
    rows_jit, summary_jit, files_jit = _run(tmp_path, "jit", "false", tmp_path / "cache")

    def values(row):
        return {k: v for k, v in row.items() if not any(t in k for t in TIMINGS)}

    assert values(rows_aot[0]) == values(rows_jit[0])
    assert files_aot == files_jit  # the manifest: each file's sha256 (params, optimizer state), RNG, data order
    assert summary_aot["aot_fallbacks"] == 0 and "aot_compile_s" not in summary_jit
    # The step's own compiles (its thread): with the programs from the background only tiny eager ops (the
    # learning-rate metric); the plain path compiles every program there, each a large share of the total.
    assert rows_aot[0]["compile_time_s"] < 0.25 * rows_jit[0]["compile_time_s"]
    assert rows_aot[0]["compile_time_s"] < 0.25 * summary_aot["aot_compile_s"]
