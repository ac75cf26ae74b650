"""`parallel.rollout.devices: auto` under off-policy GRPO (grpo.rollout_lag=L >= 1, placement separate): how many
devices decode, in which rollout layout, and how many train, picked by the preflight's predictions.

Every split r | n - r (r = 1 .. n - 1 rollout devices) is tried with every rollout layout on its r devices that the
config allows (the tp groups dividing r and the model's head counts, the rest replicas, whose data ranks split
the prompts; a tp the config sets is kept) and the update's `parallel` resolved on the other n - r. Each is
predicted as it would run (preflight.predict_step with rollout_devices=r: max(weight move + rollout,
update + the move's staging); the micro-batch and remat policy picked for that update layout when they are auto) with its memory per
device, the weight move's second copy on the rollout devices and staging copy on the update devices counted
(preflight.off_policy_memory). The fastest predicted step whose peak fits MEMORY_HEADROOM of the device wins
(ties: fewer rollout devices, then smaller tp); the candidates and the choice are logged and go into the run's
summary (`layout_search_*` keys).

With L >= 2 the rollout devices form L groups (trainers/pipeline.py): only splits whose r L divides are tried,
each rollout layout on a group's r / L devices, predicted as max((move + rollout of one batch) / L, update)
(predict_step's rollout_groups); their names read r<r>_g<L>_tp.._dp.. (the layout of one group).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Mapping

from framework.backends.maxtext.sharding import LogicalRules, abstract_mesh, mesh_shape
from framework.backends.maxtext.trainers.preflight import (MEMORY_HEADROOM, pick_update_plan, predict_step,
                                                             reshard_bytes_per_device)
from framework.backends.maxtext.trainers.rollout_plan import prompt_decision, rollout_weight_bytes
from framework.core.errors import ConfigError, CrucibleError
from framework.core.parallel import AUTO, ParallelConfig
from framework.tasks.grpo import GRPOTask

log = logging.getLogger(__name__)
KEY = "parallel.rollout.devices"


@dataclasses.dataclass
class Candidate:
    """One split and its prediction (step_s None: not predictable; `reason` says why)."""

    rollout_devices: int  # all groups together
    rollout: ParallelConfig | None  # one group's layout
    update: ParallelConfig | None
    step_s: float | None = None
    memory_gb: float | None = None
    fits: bool = False
    prediction: dict = dataclasses.field(default_factory=dict)
    reason: str = ""
    groups: int = 1  # grpo.rollout_lag's rollout groups

    @property
    def name(self) -> str:
        tp = f"_tp{self.rollout.tp}_dp{self.rollout.dp}" if self.rollout is not None else ""
        groups = f"_g{self.groups}" if self.groups > 1 else ""
        return f"r{self.rollout_devices}{groups}{tp}"

    def row(self) -> str:
        if self.step_s is None:
            return f"{self.name}: skipped ({self.reason})"
        groups = f" in each of {self.groups} groups" if self.groups > 1 else ""
        return (f"{self.name}: step {self.step_s:.6g} s (rollout {self.rollout_s:.4g} s{groups}, "
                f"update {self.update_s:.4g} s, "
                f"move {self.prediction['preflight_reshard_s']:.3g} s, staging "
                f"{self.prediction.get('preflight_stage_s', 0.0):.3g} s), {self.memory_gb:.3g} GB/device"
                f"{'' if self.fits else ' (does not fit)'}")

    @property
    def rollout_s(self) -> float:
        return self.prediction["preflight_prefill_s"] + self.prediction["preflight_decode_s"]

    @property
    def update_s(self) -> float:
        return sum(self.prediction.get(f"preflight_{name}_s", 0.0) for name in ("train", "forward"))


def rollout_layouts(rollout: Any, devices: int, prompts: int,
                    heads: tuple[int, ...]) -> tuple[list[ParallelConfig], str]:
    """(the resolved rollout layouts on `devices` the config allows: its tp, or each tp dividing the devices and
    every head count (smallest first), the data ranks dividing the prompts; why there are none, if none)."""
    from framework.backends.maxtext.sharding import rollout_parallel

    tps = [rollout.tp] if rollout.tp is not None else [
        tp for tp in range(1, devices + 1) if devices % tp == 0 and all(count % tp == 0 for count in heads)]
    layouts, reason = [], f"no rollout layout on these devices splits the {prompts} prompts"
    for tp in tps:
        try:
            layouts.append(rollout_parallel(dataclasses.replace(rollout, tp=tp), devices, prompts, lambda free: tp))
        except ConfigError as error:  # the config's other axes do not fit this tp on these devices
            reason = str(error)
    return layouts, reason


def _mesh(layout: ParallelConfig) -> dict[str, int]:
    """The mesh a resolved layout builds (sharding.mesh_shape: the one map of the axes to the mesh's)."""
    return mesh_shape(layout, layout.devices)


def predict(model: Any, weight_bytes: float, hardware: Mapping[str, Any], parallel: ParallelConfig, task: GRPOTask,
            remat: str, rollout_devices: int, rollout: ParallelConfig, total: int, groups: int = 1,
            rules: LogicalRules | None = None) -> Candidate:
    """One split's prediction: `groups` rollout groups of rollout_devices / groups devices in layout `rollout`,
    the update's `parallel` on the total - rollout_devices others; `rules` the run's logical axis rules."""
    hf, update_devices = model.hf_config, total - rollout_devices
    try:
        update = parallel.resolve(update_devices)
    except ConfigError as error:
        return Candidate(rollout_devices, rollout, None, reason=str(error), groups=groups)
    try:
        reference = weight_bytes / (update.fsdp * update.tp) if task.beta > 0 else 0.0  # the simulator omits it
        if task.micro_batch_size == "auto" or remat == "auto":
            size, remat = pick_update_plan(hf, hardware, parallel, update_devices, task, remat, reference)
            task = dataclasses.replace(task, micro_batch_size=size)
        moved = reshard_bytes_per_device(rollout_weight_bytes(model, weight_bytes), _mesh(update), _mesh(rollout),
                                         separate=True)
        prediction = predict_step(hf, hardware, parallel, update_devices, task, rollout, moved, remat=remat,
                                  rollout_devices=rollout_devices // groups, rollout_groups=groups,
                                  shared_prompt=prompt_decision(model, task, abstract_mesh(_mesh(rollout)), rules)[0])
    except CrucibleError as error:
        return Candidate(rollout_devices, rollout, update, reason=str(error), groups=groups)
    if not prediction:
        raise ConfigError(f"{KEY}: auto needs the simulator (sims) to predict the phases; set a number")
    # the reference model (beta > 0) stays on the update devices beside their peak
    memory = max(prediction["preflight_rollout_memory_gb"], prediction["preflight_update_memory_gb"] + reference / 1e9)
    fits = bool(prediction["preflight_fits"]) and memory <= MEMORY_HEADROOM * hardware["memory_gb"]
    return Candidate(rollout_devices, rollout, update, prediction["preflight_predicted_step_s"], memory, fits,
                     prediction, groups=groups)


def search(model: Any, weight_bytes: float, hardware: Mapping[str, Any], parallel: ParallelConfig, task: GRPOTask,
           remat: str, total: int, groups: int = 1, rules: LogicalRules | None = None
           ) -> tuple[Candidate, list[Candidate]]:
    """(the chosen candidate, every candidate compared) over `total` devices, the rollout in `groups` groups
    (grpo.rollout_lag); a ConfigError naming parallel.rollout.devices when none can run or none fits."""
    if total < groups + 1:
        raise ConfigError(f"{KEY}: auto with placement=separate needs {groups + 1} or more devices ({total} here): "
                          f"one per rollout group (grpo.rollout_lag={groups}) decodes while the others train; or use "
                          f"a smaller grpo.rollout_lag, or rollout_lag=0 and parallel.rollout.placement=shared")
    candidates = []
    for count in range(groups, total, groups):
        layouts, reason = rollout_layouts(parallel.rollout, count // groups, task.prompts_per_step,
                                          (model.num_heads, model.num_kv_heads))
        if not layouts:
            candidates.append(Candidate(count, None, None, reason=reason, groups=groups))
        candidates += [predict(model, weight_bytes, hardware, parallel, task, remat, count, layout, total, groups, rules)
                       for layout in layouts]
    ranked = sorted((c for c in candidates if c.fits), key=lambda c: (c.step_s, c.rollout_devices, c.rollout.tp))
    reasons = "; ".join(c.row() for c in candidates)
    if all(c.step_s is None for c in candidates):
        raise ConfigError(f"{KEY}: auto cannot predict any split of the {total} devices ({reasons}); set "
                          f"parallel.rollout.devices to a number")
    if not ranked:
        raise ConfigError(f"{KEY}: auto finds no split of the {total} devices that fits {MEMORY_HEADROOM:.0%} of "
                          f"hardware.memory_gb={hardware['memory_gb']:g} ({reasons}); set parallel.rollout.devices "
                          f"and parallel.rollout.tp, or lower grpo.max_new_tokens / grpo.micro_batch_size")
    return ranked[0], candidates


def record(chosen: Candidate, candidates: list[Candidate]) -> dict[str, Any]:
    """The summary's scalars: the choice and each candidate's predicted step, memory and fit."""
    rows: dict[str, Any] = {"layout_search_choice": chosen.name, "layout_search_rollout_tp": chosen.rollout.tp,
                            "layout_search_rollout_devices": chosen.rollout_devices}
    for candidate in candidates:
        rows[f"layout_search_{candidate.name}_step_s"] = candidate.step_s
        rows[f"layout_search_{candidate.name}_memory_gb"] = candidate.memory_gb
        rows[f"layout_search_{candidate.name}_fits"] = candidate.fits
    return rows


def choose_rollout_devices(config: Any, total: int) -> tuple[ParallelConfig, dict[str, Any]]:
    """(config.parallel with parallel.rollout.devices/dp/tp set, the summary's layout_search_* rows): the search's
    pick when the rollout is separate with devices auto, else config.parallel unchanged and no rows."""
    rollout = config.parallel.rollout
    if rollout is None or rollout.placement != "separate" or rollout.devices != AUTO:
        return config.parallel, {}
    from flax import linen as nn

    from framework.backends.maxtext.models import ModelConfig, Transformer, abstract_params, kernel_platform
    from framework.backends.maxtext.sharding import logical_axis_rules, tree_bytes

    task = config.task
    model = ModelConfig.from_pretrained(config.model_source.metadata(), param_dtype=task.param_dtype,
                                        dtype=task.compute_dtype)  # the model's config.json: no weights needed
    # the kernels and shared prefix the run's sampler will use (each candidate's remat is picked by the search)
    model = model.for_platform(model.remat, config.attention, config.decode_attention, kernel_platform(),
                               config.shared_prefix)
    weight_bytes = tree_bytes(nn.unbox(abstract_params(Transformer(model))))
    rules = logical_axis_rules(config.logical_axis_rules, "backend.adapter.logical_axis_rules")
    chosen, candidates = search(model, weight_bytes, config.hardware, config.parallel, task, config.remat, total,
                                max(task.rollout_lag, 1), rules)
    for candidate in candidates:
        log.info("grpo: %s auto candidate %s", KEY, candidate.row())
    log.info("grpo: %s auto -> %d (rollout dp=%d tp=%d%s | update on %d: %s), predicted %.4g s per step", KEY,
             chosen.rollout_devices, chosen.rollout.dp, chosen.rollout.tp,
             f" in each of {chosen.groups} groups" if chosen.groups > 1 else "", total - chosen.rollout_devices,
             chosen.update.as_dict(), chosen.step_s)
    resolved = dataclasses.replace(rollout, devices=chosen.rollout_devices, dp=chosen.rollout.dp, tp=chosen.rollout.tp)
    return dataclasses.replace(config.parallel, rollout=resolved), record(chosen, candidates)
