"""Device mesh and logical axis rules, MaxText style.

Every parameter and the main activations carry logical axis names ("embed", "heads", "batch", ...).
Rules map each logical name to mesh axes ("data", "fsdp", "expert", "tensor"); the run's `parallel`
node gives the mesh shape (dp -> data, fsdp -> fsdp, tp -> tensor; expert is 1, the models are dense; no pp
or cp). A dimension that a mesh axis does not divide evenly is replicated along that axis instead (e.g. 2 KV
heads on tensor=4), so every model fits every mesh.
GRPO's rollout runs on a second mesh over the same devices (`parallel.rollout`), with the same rules.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding, PartitionSpec

from framework.core.errors import BackendError, ConfigError
from framework.core.parallel import ParallelConfig, RolloutLayout

log = logging.getLogger(__name__)

# Ordered from least to most communication: tensor parallelism talks on every layer, so it gets
# the innermost (best-connected) devices.
MESH_AXES = ("data", "fsdp", "expert", "tensor")
ROLLOUT_KEY = "parallel.rollout"

MeshAxes = str | tuple[str, ...] | None
LogicalRules = tuple[tuple[str, MeshAxes], ...]

# Parameters: FSDP shards the embed dimension, tensor parallelism the heads/mlp/vocab dimensions.
# Activations: batch over data+fsdp, heads/mlp/vocab over tensor, embed and length unsharded.
DEFAULT_RULES: LogicalRules = (
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("norm", None),
    ("expert", "expert"),
    ("activation_batch", ("data", "fsdp")),
    ("activation_length", None),
    ("activation_embed", None),
    ("activation_heads", "tensor"),
    ("activation_kv_heads", "tensor"),
    ("activation_mlp", "tensor"),
    ("activation_vocab", "tensor"),
    ("cache_batch", ("data", "fsdp")),
    ("cache_sequence", None),
    ("cache_kv_heads", "tensor"),
    ("cache_head_dim", None),
)


def mesh_shape(parallel: ParallelConfig, num_devices: int, key: str = "parallel") -> dict[str, int]:
    """Mesh axis sizes for the run's `parallel` layout: dp -> data, fsdp -> fsdp, tp -> tensor; the expert axis
    is 1 (the models are dense)."""
    check_supported(parallel, key)
    sizes = parallel.resolve(num_devices, key)
    return {"data": sizes.dp, "fsdp": sizes.fsdp, "expert": 1, "tensor": sizes.tp}


def check_supported(parallel: ParallelConfig | RolloutLayout, key: str = "parallel") -> None:
    """backend=maxtext has no pipeline or context parallelism and no experts (models/ are dense: ep would only
    replicate the update); one axis at most takes the remaining devices."""
    from framework.core.parallel import DEVICE_AXES, REMAINING, check_dense

    check_dense(parallel.ep, "maxtext", ("fsdp", "dp", "tp"), key)

    remaining = [axis for axis in DEVICE_AXES if getattr(parallel, axis) == REMAINING]
    if len(remaining) > 1:
        raise ConfigError(f"{key}: only one axis may be -1, got {', '.join(remaining)}")
    for axis in ("pp", "cp"):
        if getattr(parallel, axis) not in (1,):
            raise ConfigError(f"{key}.{axis}: {getattr(parallel, axis)}; backend=maxtext has no "
                              f"{'pipeline' if axis == 'pp' else 'context'} parallelism (use {axis}=1)")


def build_mesh(parallel: ParallelConfig, devices: Sequence[jax.Device] | None = None, key: str = "parallel") -> Mesh:
    """A `Mesh` with axes MESH_AXES over `devices` (default: all devices), topology-aware on TPU."""
    devices = list(devices) if devices is not None else jax.devices()
    sizes = mesh_shape(parallel, len(devices), key)
    shape = tuple(sizes[axis] for axis in MESH_AXES)
    # Auto axes: shardings propagate from the parameter and constraint annotations (GSPMD).
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES), devices=devices)


def abstract_mesh(sizes: Mapping[str, int]) -> AbstractMesh:
    """The mesh a layout's {axis: size} (MESH_AXES) would build, without devices: for rules that read its shape
    (logical_to_spec) before any device is picked."""
    return AbstractMesh(tuple(sizes[axis] for axis in MESH_AXES), MESH_AXES)


def rollout_meshes(rollout: RolloutLayout, devices: int) -> Callable[[int], dict[str, int]]:
    """tp -> the mesh axis sizes of `rollout` with that tp over `devices`: a candidate of rollout_parallel's
    fitting_tp (rollout_plan.rollout_tp_for counts its cache's batch shards on it)."""
    return lambda tp: mesh_shape(rollout.with_tp(tp), devices, ROLLOUT_KEY)


def rollout_parallel(rollout: RolloutLayout, devices: int, prompts: int,
                     fitting_tp: Callable[[int], int]) -> ParallelConfig:
    """The resolved rollout layout over the update's `devices`. tp null: `fitting_tp(free)` (the preflight's
    pick from its memory estimate, among the `free` devices the fixed axes leave) while another axis is -1,
    else the remaining devices. The data ranks (dp x fsdp) must divide the prompts: each decodes whole
    prompts, the n samples of one stay together."""
    from framework.core.parallel import DEVICE_AXES, REMAINING

    tp = rollout.tp
    if tp is None:
        others_remaining = any(getattr(rollout, axis) == REMAINING for axis in DEVICE_AXES if axis != "tp")
        fixed = math.prod(max(getattr(rollout, axis), 1) for axis in DEVICE_AXES if axis != "tp")
        tp = fitting_tp(max(devices // fixed, 1)) if others_remaining else REMAINING
    layout = rollout.with_tp(tp)
    mesh_shape(layout, devices, ROLLOUT_KEY)
    resolved = layout.resolve(devices, ROLLOUT_KEY)
    if prompts % resolved.data_parallel:
        raise ConfigError(f"{ROLLOUT_KEY}: dp x fsdp = {resolved.data_parallel} does not divide grpo.prompts_per_step="
                          f"{prompts}; each data rank decodes whole prompts (set {ROLLOUT_KEY}.dp/tp)")
    return resolved


def cast_floating(tree: Any, dtype: str) -> Any:
    """The tree with its floating arrays cast to `dtype`; an integer leaf (a step count) keeps its type."""
    return jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def tree_bytes(tree: Any) -> float:
    """Bytes of a tree of arrays or shape/dtype structs."""
    return float(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def resharder(source: Mesh, shardings: Any, dtype: str) -> Callable[[Any], Any]:
    """tree -> the tree cast to `dtype` and moved to `shardings` (another mesh over the same devices).

    When both meshes order the devices alike this is one compiled program of device-to-device
    collectives (`jax.device_put` between the two meshes took 1.8 s for 2 GB of float32 weights on two
    H200s; docs/benchmarks.md), the cast part of it. Otherwise (a topology-ordered TPU mesh)
    jit refuses the mix, and the move is a device_put of the cast arrays. Moving fsdp shards to tensor
    shards, XLA may build a leaf whole on each device for a moment (its "involuntary full
    rematerialization" warning); the preflight's memory estimate does not count that.

    Disjoint devices of the same count (parallel.rollout.placement=separate, e.g. 2 | 2): the compiled
    program lays the cast weights out on the source devices as the target mesh's shape and specs say (a
    collective among the update's devices), then each shard is copied device to device to its target
    (jax.device_put of an equal sharding); a device_put between unequal shardings went through the host
    (about 1 s per move for Qwen2.5-0.5B from fsdp=2 to one H200, grpo.rollout_lag=2). Disjoint target devices
    whose count divides the source's (2 -> 1, 4 -> 2): the program lays out one copy of the target's layout per
    target-sized slice of the source devices, and the first slice's shards are copied device to device.

    The returned function's `path` says which of the three it is: "same_devices", "staged_copy" or "device_put".
    """
    def cast(tree: Any) -> Any:
        return cast_floating(tree, dtype)

    target = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, NamedSharding))[0].mesh
    if list(source.devices.flat) == list(target.devices.flat):
        return _with_path(jax.jit(cast, out_shardings=shardings), "same_devices")
    copies = staging_copies(source.devices.size, target.devices.size,
                            disjoint=not set(source.devices.flat) & set(target.devices.flat))
    if copies is not None:
        slices = source.devices.reshape((copies, *target.devices.shape))
        staging = Mesh(slices, ("copies", *target.axis_names), axis_types=(target.axis_types[0], *target.axis_types))
        first = Mesh(slices[0], target.axis_names, axis_types=target.axis_types)
        is_sharding = lambda x: isinstance(x, NamedSharding)  # noqa: E731
        stage = jax.jit(cast, out_shardings=jax.tree.map(lambda sharding: NamedSharding(staging, sharding.spec),
                                                         shardings, is_leaf=is_sharding))

        def staged_copy(tree: Any) -> Any:
            on_first = jax.tree.map(lambda x, sharding: _first_copy(x, NamedSharding(first, sharding.spec)),
                                    stage(tree), shardings, is_leaf=lambda x: isinstance(x, jax.Array))
            return jax.device_put(on_first, shardings)
        return _with_path(staged_copy, "staged_copy")
    return _with_path(lambda tree: jax.device_put(cast(tree), shardings), "device_put")


def staging_copies(source_count: int, target_count: int, disjoint: bool) -> int | None:
    """How many copies of the target's layout the weight move stages on the source devices (one per target-sized
    slice) before copying the first device to device: source_count / target_count when the device sets are disjoint
    and the target's count divides the source's; None when the move is not staged (jax.device_put instead).
    resharder moves by this rule and the preflight counts the staging copy by it."""
    if not disjoint or target_count < 1 or source_count % target_count:
        return None
    return source_count // target_count


def _first_copy(array: jax.Array, sharding: NamedSharding) -> jax.Array:
    """The shards of a staged array (the target's layout, repeated over the source's "copies" axis) that lie on
    `sharding`'s devices, as one array: no data moves."""
    shards = {shard.device: shard.data for shard in array.addressable_shards}
    return jax.make_array_from_single_device_arrays(array.shape, sharding,
                                                    [shards[device] for device in sharding.addressable_devices])


def _with_path(move: Callable[[Any], Any], path: str) -> Callable[[Any], Any]:
    def labelled(tree: Any) -> Any:
        return move(tree)

    labelled.path = path  # type: ignore[attr-defined]
    return labelled


def logical_axis_rules(overrides: Mapping[str, Any] | Iterable[Sequence[Any]] | None = None,
                       config_key: str = "logical_axis_rules") -> LogicalRules:
    """DEFAULT_RULES with `overrides` ({logical: mesh axis | [mesh axes] | null}) replacing entries."""
    if overrides is None:
        return DEFAULT_RULES
    items = overrides.items() if isinstance(overrides, Mapping) else (tuple(pair) for pair in overrides)
    replaced = dict(DEFAULT_RULES)
    known = [*replaced, "layers"]  # the scanned layers' axis has no default rule: replicated
    for logical, target in items:
        if str(logical) not in known:  # a typo (`embd`) was a rule no array names: ignored, silently
            raise ConfigError(f"{config_key}.{logical}: not a logical axis of the models; valid: {', '.join(known)}")
        replaced[str(logical)] = _mesh_axes(target, f"{config_key}.{logical}")
    return tuple(replaced.items())


def _mesh_axes(target: Any, key: str) -> MeshAxes:
    if target is None:
        return None
    axes = (target,) if isinstance(target, str) else tuple(target)
    bad = [axis for axis in axes if axis not in MESH_AXES]
    if bad:
        raise ConfigError(f"{key}: {bad} are not mesh axes; valid: {list(MESH_AXES)} or null")
    return axes[0] if len(axes) == 1 else axes


def logical_to_spec(logical_axes: Sequence[str | None], rules: LogicalRules,
                    shape: Sequence[int] | None = None, mesh: Mesh | None = None) -> PartitionSpec:
    """PartitionSpec for an array with these logical axes; with shape and mesh, uneven axes are dropped."""
    mesh_axes = nn.logical_to_mesh_axes(tuple(logical_axes), rules)
    if shape is None or mesh is None:
        return mesh_axes
    entries = []
    for dim, (size, axes) in enumerate(zip(shape, mesh_axes)):
        entries.append(_divisible_axes(size, axes, mesh, logical_axes[dim]))
    return PartitionSpec(*entries)


def _divisible_axes(size: int, axes: MeshAxes, mesh: Mesh, logical: str | None) -> MeshAxes:
    if axes is None:
        return None
    kept: list[str] = []
    for axis in (axes,) if isinstance(axes, str) else axes:
        if size % (math.prod(mesh.shape[a] for a in kept) * mesh.shape[axis]) == 0:
            kept.append(axis)
        else:
            log.debug("logical axis %s (size %d) is replicated over mesh axis %s (size %d)",
                      logical, size, axis, mesh.shape[axis])
    if not kept:
        return None
    return kept[0] if len(kept) == 1 else tuple(kept)


def named_sharding(mesh: Mesh, rules: LogicalRules, logical_axes: Sequence[str | None],
                   shape: Sequence[int]) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(logical_axes, rules, shape, mesh))


def param_shardings(boxed_params: Any, mesh: Mesh, rules: LogicalRules) -> Any:
    """NamedShardings for a tree of `nn.LogicallyPartitioned` leaves (e.g. from `jax.eval_shape(init)`)."""
    return jax.tree.map(lambda box: named_sharding(mesh, rules, box.names, box.value.shape),
                        boxed_params, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned))


def constrain(x: jax.Array, logical_axes: Sequence[str | None], mesh: Mesh | None,
              rules: LogicalRules | None) -> jax.Array:
    """Sharding constraint on an activation inside jit; a no-op without a mesh."""
    if mesh is None:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(mesh, rules or DEFAULT_RULES, logical_axes, x.shape))


def put(array: np.ndarray, mesh: Mesh | None, rules: LogicalRules | None,
        logical_axes: Sequence[str | None]) -> jax.Array:
    """Host array to device(s): sharded by the rules under a mesh, else on the default device."""
    if mesh is None:
        return jax.device_put(array)
    return jax.device_put(array, named_sharding(mesh, rules or DEFAULT_RULES, logical_axes, array.shape))


def shardings_record(params: Any, mesh: Mesh, rollout_mesh: Mesh) -> dict:
    """shardings.json's content: the meshes and the partition spec each parameter actually has."""
    def spec(array: jax.Array) -> list:
        axes = [list(axis) if isinstance(axis, tuple) else axis for axis in array.sharding.spec]
        return axes + [None] * (array.ndim - len(axes))  # XLA drops trailing unsharded dims

    specs = {jax.tree_util.keystr(key, simple=True, separator="/"): spec(array)
             for key, array in jax.tree_util.tree_leaves_with_path(params)}
    return {"mesh": dict(mesh.shape), "rollout_mesh": dict(rollout_mesh.shape), "devices": mesh.size, "params": specs}


def usable_devices(hardware: Mapping[str, Any]) -> list:
    """jax.devices(): a one-line BackendError when JAX finds none, a warning when they are not the kind the
    hardware group names (JAX_PLATFORMS=cpu runs a GPU recipe on CPU on purpose)."""
    try:
        devices = jax.devices()
    except RuntimeError as error:
        raise BackendError(f"hardware={hardware['name']}: JAX finds no usable device "
                           f"({str(error).splitlines()[0]})") from error
    expected = {"gpu": "gpu", "tpu": "tpu", "cpu": "cpu"}[hardware["accelerator"]]
    if devices[0].platform != expected:
        log.warning("hardware=%s expects %s devices; running on %d %s device(s)",
                    hardware["name"], expected, len(devices), devices[0].platform)
    return devices
