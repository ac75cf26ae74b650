"""Preflight: the simulator's (sims.api.simulate) prediction of one GRPO step, before training.

A GRPO step is simulated as its phases: the prompts' prefill, max_new_tokens decode steps of the
whole group batch (at the average context; on an fsdp rollout mesh each one all-gathers the weights,
sims/sharded_forward.py), the extra forward passes (old log-probs when ppo_epochs > 1 on-policy, reference
log-probs when beta > 0; their layers scanned over the stacked weights, which they cast from grpo.param_dtype as
they use them, sims/scan_forward.py) and ppo_epochs x (batch / micro-batch) training micro-steps. The simulator reads
the run's own `parallel` node (sims.workload.layout_from_parallel: dp x fsdp replicas, fsdp shards the optimizer
state), so the prediction is of the very layout that runs:
prefill and decode in the rollout layout (`parallel.rollout`), the rest in the update layout, plus the
resharding of the weights between them, costed as bytes / link bandwidth of the hardware file (not by
the simulator's collective model).

The rollout layout's tp, when the config leaves it null, is picked from a memory estimate in rollout_plan.py.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Mapping

from framework.backends.maxtext.config import REMAT_NAMES, REMAT_WORKLOADS
from framework.backends.maxtext.sharding import staging_copies
from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError, CrucibleError
from framework.core.parallel import ParallelConfig
from framework.tasks.grpo import GRPOTask

log = logging.getLogger(__name__)
ROLLOUT_PHASES = ("prefill", "decode")
# Share of device memory the rollout may plan for: the rest is for decode activations, logits and XLA's buffers.
MEMORY_HEADROOM = 0.85


def train_workload(task: GRPOTask, micro_batch: int, zero: bool, remat: str) -> dict:
    """One optimizer step of the update as it runs: the step's rows in micro-batches of `micro_batch`
    whose gradients accumulate (the simulator's `microbatches`), then one AdamW step; each layer under
    the remat policy `remat` (config.REMAT_WORKLOADS), the vocabulary projection logprob_chunk_size
    positions at a time and over the completion's positions only (trainers/update.py:completion_log_probs)."""
    return {"mode": "train", "batch": task.rows_per_step, "microbatches": task.rows_per_step // micro_batch,
            "seq_len": task.max_prompt_tokens + task.max_new_tokens, "dtype": SHORT[task.compute_dtype],
            "zero": zero, "shard_weights": zero,  # fsdp shards the weights too: gathered every micro-batch
            "logits_chunk": task.logprob_chunk_size, "loss_len": task.max_new_tokens,
            **REMAT_WORKLOADS[remat]}


def grpo_phases(task: GRPOTask, zero: bool, remat: str = "none", rollout_sharded: bool = False,
                shared_prompt: bool = False) -> list[tuple[str, dict, int]]:
    """(name, simulator workload, how many times it runs per step) for one GRPO step; `remat`: the
    update's remat policy (backend.adapter.remat). `rollout_sharded`: the rollout's mesh has fsdp > 1, so
    its prefill and every decode step all-gather the weight shards (sims/sharded_forward.py); the extra
    forward passes run on the update's mesh and gather likewise when it is fsdp (`zero`). `shared_prompt`: the
    sampler keeps each prompt's K/V once for its samples (rollout_plan.prompt_decision): the decode is the simulator's
    shared-prefix decode (workload shared_prefix = num_generations over the seq_len prompt tokens: a kernel call
    over each prompt for its group, one over each row's own tokens, and their merge; sims/shared_prefix.py)."""
    dtype = SHORT[task.compute_dtype]
    prompt, new, rows = task.max_prompt_tokens, task.max_new_tokens, task.rows_per_step
    shared = {"seq_len": prompt, "shared_prefix": task.num_generations} if shared_prompt else {}
    sequence = prompt + new
    micro_steps = rows // task.micro_batch_size
    # off-policy (rollout_lag >= 1) the sampler's behaviour log-probs are the old ones: no pass of their own
    extra_forwards = int(task.ppo_epochs > 1 and not task.rollout_lag) + int(task.beta > 0)
    rollout = {"dtype": dtype, "zero": rollout_sharded, "shard_weights": rollout_sharded}
    phases = [
        ("prefill", {"mode": "prefill", "batch": task.prompts_per_step, "seq_len": prompt, **rollout}, 1),
        ("decode", {"mode": "decode", "batch": rows, "context_len": prompt + max(1, new // 2), **shared, **rollout},
         new),
        ("train", train_workload(task, task.micro_batch_size, zero, remat), task.ppo_epochs),
    ]
    if extra_forwards:
        # the completion's log-probs: its positions projected onto the vocabulary, logprob_chunk_size at a time
        phases.append(("forward", {"mode": "prefill", "batch": task.micro_batch_size, "seq_len": sequence,
                                   "dtype": dtype, "zero": zero, "shard_weights": zero, "scanned": True,
                                   "loss_len": new, "logits_chunk": task.logprob_chunk_size,
                                   "param_dtype": SHORT[task.param_dtype]},  # cast as used (the update's master)
                       extra_forwards * micro_steps))
    return phases


def predict_step(hf_config: Mapping[str, Any], hardware: Mapping[str, Any], parallel: ParallelConfig,
                 devices: int, task: GRPOTask, rollout: ParallelConfig | None = None,
                 reshard_bytes: float = 0.0, remat: str = "none", rollout_devices: int = 0,
                 rollout_groups: int = 1, shared_prompt: bool = False) -> dict[str, Any]:
    """Predicted seconds per GRPO step (and per phase) and the peak memory per device of its phases.

    `rollout`: the resolved rollout layout (None: the update's); `reshard_bytes`: what each device receives
    when the weights move to it (reshard_bytes_per_device). `rollout_devices` > 0: the rollout decodes on
    that many devices of its own while the update trains on `devices` (grpo.rollout_lag=1): the step is
    max(the move + rollout phases, update phases + the move's staging gather on the update devices), instead of
    their sum with the move (the copy overlaps the next update). `rollout_groups` L > 1 (grpo.rollout_lag=L): L such
    groups of `rollout_devices` each sample a batch at once, so one finishes every (move + rollout) / L seconds. Returns {} when the simulator is not
    installed; raises CrucibleError when it cannot model the run.
    """
    try:
        from sims.api import simulate
        from sims.stacks import stack_for_backend
        from sims.workload import layout_from_parallel
    except ImportError:
        log.warning("preflight: the simulator (sims) is not importable; no prediction")
        return {}
    layout, zero = layout_from_parallel(parallel.as_dict(), devices)
    rollout_layout, rollout_sharded = layout_from_parallel((rollout or parallel).as_dict(), rollout_devices or devices)
    reshard_s = reshard_seconds(reshard_bytes, hardware)
    prediction: dict[str, Any] = {"preflight_reshard_s": reshard_s}
    phase_sums = {"rollout": 0.0, "update": 0.0}
    memory, fits, breakdowns = 0.0, True, {}
    for name, workload, repeats in grpo_phases(task, zero, remat, rollout_sharded, shared_prompt):
        phase_layout = rollout_layout if name in ROLLOUT_PHASES else layout
        summary = simulate(hf_config, hardware, phase_layout, workload, stack=stack_for_backend("maxtext")).summary()
        if summary["status"] != "ok":
            raise CrucibleError(f"preflight: the simulator cannot model the {name} phase: {summary['reason']}")
        seconds = summary["latency_s"] * repeats
        prediction[f"preflight_{name}_s"] = seconds
        phase_sums["rollout" if name in ROLLOUT_PHASES else "update"] += seconds
        memory = max(memory, summary["memory_per_device_gb"])
        fits = fits and bool(summary["fits"])
        breakdowns[name] = summary["memory_breakdown_gb"]
    overlapped = rollout_devices > 0
    if not overlapped:
        prediction["preflight_predicted_step_s"] = sum(phase_sums.values()) + reshard_s
        return prediction | {"preflight_overlapped": False, "preflight_memory_per_device_gb": memory,
                             "preflight_fits": fits}
    update = parallel.resolve(devices)
    # a rollout group's devices are never the update's: disjoint
    staged = staging_copies(devices, rollout_devices, disjoint=True) is not None
    staging = staging_bytes_per_device(reshard_bytes, update, rollout or parallel, staged=staged)
    # the staged layout is gathered among the update devices before the copy, each holding 1 / its shards of it
    # (exact for one-device groups and layouts on other axes; an axis both split is charged though held locally)
    stage_s = reshard_seconds(staging * (1 - 1 / (update.fsdp * update.tp)), hardware) if staged else 0.0
    # a batch every (move + rollout) / L seconds from L groups sampling at once; the move's copy is off the
    # update's path (pipeline.OffPolicyRollouts.after_update does not wait for it), its staging is not; and one
    # move leaves the update devices per step (after_update waits for the previous one)
    step = max((phase_sums["rollout"] + reshard_s) / rollout_groups, phase_sums["update"] + stage_s, reshard_s)
    prediction |= {"preflight_predicted_step_s": step, "preflight_stage_s": stage_s, "preflight_overlapped": True,
                   "preflight_memory_per_device_gb": memory, "preflight_fits": fits}
    return prediction | off_policy_memory(breakdowns, reshard_bytes, staging, hardware["memory_gb"])


def resolve_update_plan(hf_config: Mapping[str, Any], config: Any, mesh: Any, weight_bytes: float
                        ) -> tuple[GRPOTask, str]:
    """grpo.micro_batch_size and backend.adapter.remat of a GRPOConfig, auto -> pick_update_plan's pick (logged) on
    the update's `mesh`: the task as the update will run it and its remat policy."""
    task, remat = config.task, config.remat
    if task.micro_batch_size != "auto" and remat != "auto":
        return task, remat
    shards = mesh.shape["fsdp"] * mesh.shape["expert"] * mesh.shape["tensor"]
    reference = weight_bytes / shards if task.beta > 0 else 0.0  # not in the simulator's train memory
    size, picked = pick_update_plan(hf_config, config.hardware, config.parallel, mesh.size, task, remat,
                                    resident_bytes=reference)
    if task.micro_batch_size == "auto":
        log.info("grpo: micro_batch_size auto -> %d (the preflight's memory estimate)", size)
    if remat == "auto":
        log.info("grpo: remat auto -> %s (the preflight's memory estimate at micro-batch %d)", picked, size)
    return dataclasses.replace(task, micro_batch_size=size), picked


def pick_update_plan(hf_config: Mapping[str, Any], hardware: Mapping[str, Any], parallel: ParallelConfig,
                     devices: int, task: GRPOTask, remat: str, resident_bytes: float = 0.0) -> tuple[int, str]:
    """(micro-batch, remat policy) for grpo.micro_batch_size and backend.adapter.remat, either of them auto.

    A micro-batch size fits when the simulator fits its training micro-step in MEMORY_HEADROOM of the
    device beside `resident_bytes` (what the simulator does not count: the reference model with beta > 0).
    micro_batch_size=auto: the largest divisor of the step's rows (a multiple of the data-parallel replicas,
    so every device gets whole rows) that fits under some allowed policy; larger micro-batches ran the
    update faster (docs/benchmarks.md). remat=auto: at that size, the first policy of REMAT_NAMES (fastest
    first: none, minimal, full) that fits. When nothing fits: the smallest size and the last policy (the
    preflight's memory check then refuses the run)."""
    try:
        from sims.api import simulate
        from sims.stacks import stack_for_backend
        from sims.workload import layout_from_parallel
    except ImportError as error:
        raise ConfigError("grpo.micro_batch_size / backend.adapter.remat: auto needs the simulator (sims) to "
                          "estimate memory; set them") from error

    layout, zero = layout_from_parallel(parallel.as_dict(), devices)
    rows = task.rows_per_step
    sizes = [task.micro_batch_size]
    if task.micro_batch_size == "auto":
        sizes = [m for m in range(rows, 0, -1) if rows % m == 0 and m % layout["dp"] == 0]
    if not sizes:
        raise ConfigError(f"grpo.micro_batch_size: auto finds no divisor of the {rows} rows per step that splits over "
                          f"the {layout['dp']} data-parallel replicas; set a number")
    policies = REMAT_NAMES if remat == "auto" else (remat,)
    budget_gb = hardware["memory_gb"] * MEMORY_HEADROOM - resident_bytes / 1e9
    for size in sizes:
        for policy in policies:
            summary = simulate(hf_config, hardware, layout, train_workload(task, size, zero, policy),
                               stack=stack_for_backend("maxtext")).summary()
            if summary["status"] != "ok":
                raise ConfigError(f"grpo.micro_batch_size / backend.adapter.remat: auto needs the simulator's memory "
                                  f"estimate, which cannot model this run ({summary['reason']}); set them")
            if summary["fits"] and summary["memory_per_device_gb"] <= budget_gb:
                return size, policy
    return sizes[-1], policies[-1]


def reshard_bytes_per_device(weight_bytes: float, update_mesh: Mapping[str, int],
                              rollout_mesh: Mapping[str, int], separate: bool = False) -> float:
    """Bytes each device receives when the weights go from the update's shards to the rollout's.

    A device holds 1/u of the weights (u = the update's fsdp x expert x tensor shards) and needs 1/r
    (r = the rollout's shards); of that it already holds 1/(u r) (e.g. FSDP -> replicas: an all-gather,
    W (u - 1) / u). Equal meshes move nothing; a replicated update (u = 1) neither. `separate`: the rollout's
    devices are not the update's (parallel.rollout.placement=separate) and receive their whole 1/r.
    """
    update_shards, rollout_shards = (mesh["fsdp"] * mesh["expert"] * mesh["tensor"] for mesh in (update_mesh, rollout_mesh))
    if separate:
        return weight_bytes / rollout_shards
    if dict(update_mesh) == dict(rollout_mesh):
        return 0.0
    return weight_bytes / rollout_shards * (1.0 - 1.0 / update_shards)


def reshard_seconds(bytes_per_device: float, hardware: Mapping[str, Any]) -> float:
    """bytes / the hardware file's per-direction device link (intra_node_gb_s; inter_node_gb_s over several
    nodes); without a link figure (one host's CPU devices share memory) its memory bandwidth."""
    if bytes_per_device <= 0:
        return 0.0
    link_gb_s = hardware.get("inter_node_gb_s") if hardware.get("nodes", 1) > 1 else hardware.get("intra_node_gb_s")
    if not link_gb_s:
        link_gb_s = 1000.0 * hardware["hbm_tb_s"]
    return bytes_per_device / (link_gb_s * 1e9)


def refuse_out_of_memory(prediction: Mapping[str, Any], hardware: Mapping[str, Any], task: GRPOTask) -> None:
    """ConfigError before anything compiles when the predicted peak memory exceeds the device's: an XLA
    out-of-memory error comes only after minutes of compiling and names no setting."""
    if prediction.get("preflight_fits") is not False:
        return
    if "preflight_rollout_memory_gb" in prediction:  # one step off-policy: say which side and the layout keys
        raise ConfigError(
            f"parallel.rollout: the preflight predicts {prediction['preflight_rollout_memory_gb']:.3g} GB per rollout "
            f"device (two weight copies while they move) and {prediction['preflight_update_memory_gb']:.3g} GB per "
            f"update device (with the move's staging copy); hardware={hardware['name']} holds "
            f"{hardware['memory_gb']:g} GB; raise parallel.rollout.tp, change parallel.rollout.devices (or use auto), "
            f"lower grpo.max_new_tokens ({task.max_new_tokens}) or grpo.micro_batch_size ({task.micro_batch_size}), "
            f"or set grpo.preflight=false to try anyway")
    raise ConfigError(
        f"grpo: the preflight predicts {prediction['preflight_memory_per_device_gb']:.3g} GB per device and "
        f"hardware={hardware['name']} holds {hardware['memory_gb']:g} GB; lower grpo.max_prompt_tokens "
        f"({task.max_prompt_tokens}), grpo.max_new_tokens ({task.max_new_tokens}), grpo.micro_batch_size "
        f"({task.micro_batch_size}) or grpo.prompts_per_step ({task.prompts_per_step}), shard with parallel.fsdp, "
        f"or set grpo.preflight=false to try anyway")


def preflight_warnings(summary: dict) -> list[str]:
    """The run's warning when the simulator predicts more memory per device than the device holds."""
    if summary.get("preflight_fits") is not False:
        return []
    return [f"the simulator predicts {summary['preflight_memory_per_device_gb']:.3g} GB per device, more than the "
            f"device holds (preflight_fits=false)"]


def staging_bytes_per_device(reshard_bytes: float, update: ParallelConfig, rollout: ParallelConfig,
                             staged: bool) -> float:
    """What the move to separate rollout devices lays out on each update device first (sharding.resharder):
    `staged` (a rollout group's device count divides the update's) a copy of the rollout's layout on every
    rollout-sized slice of the update devices, so each holds a rollout device's share (1/r: for a one-device group
    a whole copy); otherwise the cast copy in the update's own layout (1/u)."""
    if staged:
        return reshard_bytes
    rollout_shards, update_shards = rollout.fsdp * rollout.tp, update.fsdp * update.tp
    return reshard_bytes * rollout_shards / update_shards


def off_policy_memory(breakdowns: Mapping[str, Mapping[str, float]], incoming_bytes: float, staging_bytes: float,
                      capacity_gb: float) -> dict[str, Any]:
    """Peak GB per device of each side under grpo.rollout_lag >= 1 (a rollout group's devices), from the simulator's
    per-phase breakdowns.
    Rollout devices: the prefill/decode peak (weights, KV cache, activations) plus the incoming copy, as the next
    weights arrive while the old ones still decode. Update devices: the training peak plus the staging copy: the
    host does not wait for the move (pipeline.OffPolicyRollouts.after_update), so the next update may start while
    the copy still leaves."""
    rollout_gb = max(sum(breakdowns[name].values()) for name in ROLLOUT_PHASES) + incoming_bytes / 1e9
    update_peak = max(sum(parts.values()) for name, parts in breakdowns.items() if name not in ROLLOUT_PHASES)
    update_gb = update_peak + staging_bytes / 1e9
    return {"preflight_rollout_memory_gb": rollout_gb, "preflight_update_memory_gb": update_gb,
            "preflight_memory_per_device_gb": max(rollout_gb, update_gb),
            "preflight_fits": rollout_gb <= capacity_gb and update_gb <= capacity_gb}
