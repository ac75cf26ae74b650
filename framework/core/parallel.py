"""The one parallel vocabulary of every run: dp, fsdp, tp, pp, ep, cp (the top-level `parallel` node).

Its default comes from the hardware file; `parallel.tp=2` on the command line overrides it. The
simulator, the JAX mesh, megatron's parallel_state and torch's launch all read this node, so a
preflight predicts the very layout that runs.

    dp    data-parallel replicas (whole model copies)
    fsdp  data-parallel ranks that also shard parameters and optimizer state (ZeRO-3 / FSDP)
    tp    tensor parallel (Megatron-style column/row splits)
    pp    pipeline stages
    ep    expert parallel (MoE experts spread over ranks; carved from dp x fsdp, as megatron does)
    cp    context parallel (the sequence split over ranks)

One axis may be -1: it takes the devices the others leave.

`parallel.rollout` is the layout of a reinforcement-learning rollout (decoding) on the same devices, in
the same axes: a policy trained under FSDP decodes fastest as data-parallel replicas, or tensor-parallel
groups x replicas when one device cannot hold it. Its tp may be null: with another axis at -1 the backend
picks the smallest group whose weights and KV cache fit one device; with none, tp takes the devices the
other axes leave. Only backend=maxtext's GRPO reads it; backends without a rollout ignore it.

`parallel.rollout.placement`: shared (the rollout decodes on the update's devices, between updates) or
separate (it decodes on its own `parallel.rollout.devices` devices, the update trains on the rest, both at
the same time: GRPO one step off-policy, `grpo.rollout_lag: 1`; with `grpo.rollout_lag: L` >= 2 they form L
groups, a multiple of L). `devices: auto` (the default) lets the backend pick how many decode when separate and
means none when shared; an integer needs placement separate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from framework.core.errors import ConfigError

REMAINING = -1
AXES = ("dp", "fsdp", "tp", "pp", "ep", "cp")
# the axes whose product is the number of devices; ep is carved from dp x fsdp x cp
DEVICE_AXES = ("dp", "fsdp", "tp", "pp", "cp")
PLACEMENTS = ("shared", "separate")  # parallel.rollout.placement
AUTO = "auto"  # parallel.rollout.devices: the backend's preflight picks the split (maxtext: trainers/layout_search.py)


def check_dense(ep: int, backend: str, axes: tuple[str, ...], key: str = "parallel") -> None:
    """A backend whose models have no experts refuses ep > 1: the expert axis would only replicate the update.
    `axes`: what the backend accepts instead (the message names no axis it would refuse next)."""
    if ep != 1:
        *others, last = [f"{key}.{axis}" for axis in axes]
        raise ConfigError(f"{key}.ep: {ep}; backend={backend} trains dense models (no experts), ep must be 1; "
                          f"spread the devices with {', '.join(others)}{' or ' if others else ''}{last}")


@dataclass
class RolloutLayout:
    """`parallel.rollout`: the rollout's layout; tp None = chosen by the backend from its memory estimate;
    placement shared | separate, devices: how many decode when separate (auto: the backend's pick; None or auto
    when shared)."""

    dp: int
    fsdp: int
    tp: int | None
    pp: int
    ep: int
    cp: int
    placement: str
    devices: int | Literal["auto"] | None

    def check_placement(self, total: int, key: str = "parallel.rollout") -> int:
        """The devices the rollout takes away from the update: 0 when shared, else `devices` (1 .. total-1)."""
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"{key}.placement: '{self.placement}' is not valid; use one of {', '.join(PLACEMENTS)}")
        if self.placement == "shared":
            if self.devices not in (None, AUTO):
                raise ConfigError(f"{key}.devices: {self.devices} needs {key}.placement=separate; use auto or null "
                                  "when shared")
            return 0
        if self.devices == AUTO:
            raise ConfigError(f"{key}.devices: auto is resolved by the backend's preflight before the devices split; "
                              f"set a number 1 .. {total - 1} where the backend has no such pick")
        if total < 2:
            raise ConfigError(f"{key}.devices: placement=separate needs 2 or more devices ({total} here): one decodes "
                              f"while the others train; use placement=shared on one device")
        if self.devices is None or not 1 <= self.devices < total:
            raise ConfigError(f"{key}.devices: {self.devices} is not valid with placement=separate on {total} "
                              f"devices; use auto or 1 .. {total - 1} (the rest train)")
        return self.devices

    def with_tp(self, tp: int) -> "ParallelConfig":
        """The layout to resolve once tp is known: a ParallelConfig of the same axes."""
        return ParallelConfig(**{axis: getattr(self, axis) for axis in AXES if axis != "tp"}, tp=tp)


@dataclass
class ParallelConfig:
    dp: int
    fsdp: int
    tp: int
    pp: int
    ep: int
    cp: int
    # The YAML always gives it; None where a layout is built in code (the simulator's, a benchmark's).
    rollout: RolloutLayout | None = field(default=None, kw_only=True)

    def resolve(self, devices: int, key: str = "parallel") -> "ParallelConfig":
        """Every axis a positive size; the -1 axis takes the remaining devices; the product equals `devices`."""
        sizes = self.as_dict()
        for axis, size in sizes.items():
            if size != REMAINING and size < 1:
                raise ConfigError(f"{key}.{axis}: {size} is not valid; use an integer >= 1 or -1 (the remaining devices)")
        remaining = [a for a in DEVICE_AXES if sizes[a] == REMAINING]
        if sizes["ep"] == REMAINING:
            raise ConfigError(f"{key}.ep: -1 is not valid; ep divides dp x fsdp x cp, give its size")
        if len(remaining) > 1:
            raise ConfigError(f"{key}: only one axis may be -1, got {', '.join(remaining)}")
        fixed = 1
        for axis in DEVICE_AXES:
            fixed *= 1 if sizes[axis] == REMAINING else sizes[axis]
        if remaining:
            if devices % fixed:
                raise ConfigError(f"{key}: {devices} devices do not split into the fixed axes' product {fixed}")
            sizes[remaining[0]] = devices // fixed
        product = 1
        for axis in DEVICE_AXES:
            product *= sizes[axis]
        if product != devices:
            layout = " x ".join(f"{a}={sizes[a]}" for a in DEVICE_AXES)
            raise ConfigError(f"{key}: {layout} uses {product} devices, but {devices} are there; set one axis to -1")
        data_ranks = sizes["dp"] * sizes["fsdp"] * sizes["cp"]
        if data_ranks % sizes["ep"]:
            raise ConfigError(f"{key}.ep: {sizes['ep']} must divide dp x fsdp x cp = {data_ranks}")
        return ParallelConfig(**sizes, rollout=self.rollout)

    @property
    def devices(self) -> int:
        product = 1
        for axis in DEVICE_AXES:
            product *= getattr(self, axis)
        return product

    @property
    def data_parallel(self) -> int:
        """Ranks that see different data: dp x fsdp."""
        return self.dp * self.fsdp

    def as_dict(self) -> dict[str, int]:
        """The six axes (not the rollout layout)."""
        return {axis: getattr(self, axis) for axis in AXES}
