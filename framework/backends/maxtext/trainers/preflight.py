"""Preflight: the simulator's (sims.api.simulate) prediction of one GRPO step, before training.

A GRPO step is simulated as its phases: the prompts' prefill, max_new_tokens decode steps of the
whole group batch (at the average context), the extra forward passes (old log-probs when
ppo_epochs > 1, reference log-probs when beta > 0) and ppo_epochs x (batch / micro-batch)
training micro-steps. The simulator reads the run's own `parallel` node (sims.workload.layout_from_parallel:
dp x fsdp replicas, fsdp shards the optimizer state), so the prediction is of the very layout that runs.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Any, Mapping

from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError, CrucibleError
from framework.core.parallel import ParallelConfig
from framework.tasks.grpo import GRPOTask

log = logging.getLogger(__name__)


def grpo_phases(task: GRPOTask, zero: bool) -> list[tuple[str, dict, int]]:
    """(name, simulator workload, how many times it runs per step) for one GRPO step."""
    dtype = SHORT[task.compute_dtype]
    prompt, new, rows = task.max_prompt_tokens, task.max_new_tokens, task.rows_per_step
    sequence = prompt + new
    micro_steps = rows // task.micro_batch_size
    extra_forwards = int(task.ppo_epochs > 1) + int(task.beta > 0)
    phases = [
        ("prefill", {"mode": "prefill", "batch": task.prompts_per_step, "seq_len": prompt, "dtype": dtype}, 1),
        ("decode", {"mode": "decode", "batch": rows, "context_len": prompt + new // 2, "dtype": dtype}, new),
        ("train", {"mode": "train", "batch": task.micro_batch_size, "seq_len": sequence, "dtype": dtype,
                   "zero": zero}, task.ppo_epochs * micro_steps),
    ]
    if extra_forwards:
        phases.append(("forward", {"mode": "prefill", "batch": task.micro_batch_size, "seq_len": sequence,
                                   "dtype": dtype}, extra_forwards * micro_steps))
    return phases


def predict_step(hf_config: Mapping[str, Any], hardware: Mapping[str, Any], parallel: ParallelConfig,
                 devices: int, task: GRPOTask) -> dict[str, Any]:
    """Predicted seconds per GRPO step (and per phase) and the peak memory per device of its phases.

    Returns {} when the simulator is not installed; raises CrucibleError when it cannot model the run.
    """
    try:
        from sims.api import simulate
        from sims.stacks import stack_for_backend
        from sims.workload import layout_from_parallel
    except ImportError:
        log.warning("preflight: the simulator (sims) is not importable; no prediction")
        return {}
    layout, zero = layout_from_parallel(asdict(parallel), devices)
    prediction: dict[str, Any] = {"preflight_predicted_step_s": 0.0}
    memory, fits = 0.0, True
    for name, workload, repeats in grpo_phases(task, zero):
        summary = simulate(hf_config, hardware, layout, workload, stack=stack_for_backend("maxtext")).summary()
        if summary["status"] != "ok":
            raise CrucibleError(f"preflight: the simulator cannot model the {name} phase: {summary['reason']}")
        seconds = summary["latency_s"] * repeats
        prediction[f"preflight_{name}_s"] = seconds
        prediction["preflight_predicted_step_s"] += seconds
        memory = max(memory, summary["memory_per_device_gb"])
        fits = fits and bool(summary["fits"])
    prediction |= {"preflight_memory_per_device_gb": memory, "preflight_fits": fits}
    return prediction


def refuse_out_of_memory(prediction: Mapping[str, Any], hardware: Mapping[str, Any], task: GRPOTask) -> None:
    """ConfigError before anything compiles when the predicted peak memory exceeds the device's: an XLA
    out-of-memory error comes only after minutes of compiling and names no setting."""
    if prediction.get("preflight_fits") is not False:
        return
    raise ConfigError(
        f"grpo: the preflight predicts {prediction['preflight_memory_per_device_gb']:.3g} GB per device and "
        f"hardware={hardware['name']} holds {hardware['memory_gb']:g} GB; lower grpo.max_prompt_tokens "
        f"({task.max_prompt_tokens}), grpo.max_new_tokens ({task.max_new_tokens}), grpo.micro_batch_size "
        f"({task.micro_batch_size}) or grpo.prompts_per_step ({task.prompts_per_step}), shard with parallel.fsdp, "
        f"or set grpo.preflight=false to try anyway")
