"""Device and compiler patches of the maxtext backend.

All of them run at `setup`, before the trainer touches a device: XLA flags and JAX device
settings only take effect before JAX initialises its backends.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from framework.core.patches import PatchContext, Phase, register_patch

GPU_XLA_FLAGS = (
    # Overlap collectives (FSDP all-gathers, gradient reduce-scatters) with compute.
    "--xla_gpu_enable_latency_hiding_scheduler=true",
)
COMPILE_CACHE_MIN_SECONDS = 0.5  # programs that compile faster are not worth a cache entry


def add_xla_flags(flags: tuple[str, ...]) -> list[str]:
    """Append flags to XLA_FLAGS unless the user set the same flag (any value); returns those added."""
    current = os.environ.get("XLA_FLAGS", "").split()
    present = {flag.split("=", 1)[0] for flag in current}
    added = [flag for flag in flags if flag.split("=", 1)[0] not in present]
    if added:
        os.environ["XLA_FLAGS"] = " ".join(current + added)
    return added


def mesh_device_count(ctx: PatchContext) -> int:
    """Devices the `parallel` layout asks for at least: the product of its fixed (not -1) device axes, plus
    the rollout's own devices with parallel.rollout.placement=separate; with devices auto, the hardware's
    devices (the preflight then splits them; at least one for each phase)."""
    from framework.core.parallel import AUTO, DEVICE_AXES

    rollout = ctx.config.parallel.get("rollout") or {}
    fixed = math.prod(size for axis in DEVICE_AXES if (size := ctx.config.parallel[axis]) != -1)
    if rollout.get("placement") != "separate":
        return fixed
    if rollout.get("devices") == AUTO:  # a device for each of grpo.rollout_lag's rollout groups at least
        hardware, groups = ctx.config.hardware, max(int((ctx.config.get("grpo") or {}).get("rollout_lag") or 1), 1)
        return max(fixed + groups, int(hardware.devices_per_node) * int(hardware.nodes))
    return fixed + (rollout.get("devices") or 0)


def mesh_needs_several_devices(ctx: PatchContext) -> bool:
    return mesh_device_count(ctx) > 1


@register_patch("maxtext.gpu_xla_flags", backend="maxtext", phase=Phase.SETUP, hardware=["gpu"],
                description="XLA GPU flags: latency-hiding scheduler (overlaps collectives with compute)")
def gpu_xla_flags(ctx: PatchContext) -> None:
    add_xla_flags(GPU_XLA_FLAGS)


@register_patch("maxtext.cpu_host_devices", backend="maxtext", phase=Phase.SETUP, hardware=["cpu"],
                condition=mesh_needs_several_devices,
                description="on CPU, split the host into as many devices as the parallel layout asks for")
def cpu_host_devices(ctx: PatchContext) -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", mesh_device_count(ctx))


@register_patch("maxtext.compilation_cache", backend="maxtext", phase=Phase.SETUP,
                description="persistent JAX compilation cache in <cache_dir>/jax: a resumed or requeued run "
                            "skips recompiling")
def compilation_cache(ctx: PatchContext) -> None:
    import jax

    cache = Path(ctx.backend_config.cache_dir) / "jax"
    cache.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache.resolve()))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", COMPILE_CACHE_MIN_SECONDS)
