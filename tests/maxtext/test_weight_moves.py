"""The weight move between the update's and the rollout's devices (sharding.resharder), on 4 forced CPU
devices: 2 | 2 and 2 -> 1 take the staged device-to-device path.

The check runs this file as a script in a subprocess (XLA_FLAGS before jax is imported).
"""

from __future__ import annotations

import json

import numpy as np


def test_two_to_two_and_two_to_one_weight_moves_take_the_staged_device_to_device_path():
    """2 | 2 and 2 -> 1: fsdp shards -> replicas or tensor shards on the other devices, cast, by a compiled layout on
    the update's devices then device-to-device copies; the plain device_put (unequal counts) would also give the right
    values and shardings, so the path is pinned by what jax.device_put received."""
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, 4, timeout=300)
    for name, spec in (("dp2", "P()"), ("tp2", "P(None, 'tensor')")):
        assert facts[name] == {"equal": True, "target_sharding": True, "path": "staged_copy",
                               "staging_copies_device_to_device": True,
                               "device_put_received": [[[2, 3], spec]]}, facts[name]
    one = facts["one"]  # 2 -> 1 (a lag-2 rollout group): a whole cast copy staged on device 2, copied to device 0
    assert one == {"equal": True, "target_sharding": True, "path": "staged_copy",
                   "staging_copies_device_to_device": True, "device_put_received": [[[2], "P()"]]}, one


def test_staging_copies_is_the_count_ratio_for_disjoint_devices_the_target_divides():
    """One rule for the move (resharder) and the preflight's staging copy: a copy per target-sized slice."""
    from framework.backends.maxtext.sharding import staging_copies

    assert [staging_copies(4, 2, True), staging_copies(4, 1, True), staging_copies(2, 2, True)] == [2, 4, 1]
    assert staging_copies(4, 3, True) is None  # 3 does not divide 4: device_put
    assert staging_copies(2, 4, True) is None  # more target devices than source ones
    assert staging_copies(4, 2, False) is None  # shared devices: never staged
    assert staging_copies(4, 0, True) is None


def _two_to_two_moves() -> dict:
    """sharding.resharder from fsdp=2 on devices 2, 3 to a rollout mesh on devices 0, 1: (values equal the
    cast, shardings the target's, an equal staging sharding: jax copies device to device, not via the host,
    the staged path ran: its one jax.device_put got arrays already in the target's layout on the update's devices);
    and from devices 2, 3 to device 0 alone (a count dividing the source's): one cast copy laid out on each
    target-sized slice of the update's devices (here whole on 2 and on 3), the first slice's copied to device 0."""
    import jax
    from jax._src.array import _sharding_indices_and_eq
    from jax.sharding import NamedSharding, PartitionSpec

    from framework.backends.maxtext.sharding import build_mesh, resharder
    from framework.core.parallel import ParallelConfig

    devices, facts, received = jax.devices(), {}, []
    plain_device_put = jax.device_put

    def recording_device_put(tree, target=None, **kwargs):  # what each move hands jax.device_put
        received.append([(sorted(d.id for d in x.sharding.device_set), x.sharding.spec) for x in jax.tree.leaves(tree)])
        return plain_device_put(tree, target, **kwargs)

    source = build_mesh(ParallelConfig(dp=1, fsdp=2, tp=1, pp=1, ep=1, cp=1), devices[2:4])
    weights = np.arange(64 * 8, dtype=np.float32).reshape(64, 8) / 7
    staged = jax.jit(lambda x: x, out_shardings=NamedSharding(source, PartitionSpec("fsdp", None)))(weights)
    for name, axes, spec, targets in (("dp2", {"dp": 2, "tp": 1}, PartitionSpec(), devices[:2]),
                                      ("tp2", {"dp": 1, "tp": 2}, PartitionSpec(None, "tensor"), devices[:2]),
                                      ("one", {"dp": 1, "tp": 1}, PartitionSpec(), devices[:1])):
        target = NamedSharding(build_mesh(ParallelConfig(fsdp=1, pp=1, ep=1, cp=1, **axes), targets), spec)
        move = resharder(source, {"w": target}, "bfloat16")
        received.clear()
        jax.device_put = recording_device_put
        try:
            moved = move({"w": staged})["w"]
        finally:
            jax.device_put = plain_device_put
        first = source.devices.flat[:len(targets)]  # the staged copy on the first target-sized slice
        staging = NamedSharding(jax.sharding.Mesh(np.array(first).reshape(target.mesh.devices.shape),
                                                  target.mesh.axis_names), spec)
        facts[name] = {"equal": bool(np.array_equal(np.asarray(moved), weights.astype(moved.dtype))),
                       "target_sharding": moved.sharding == target, "path": move.path,
                       "staging_copies_device_to_device": bool(_sharding_indices_and_eq(staging, target, 2)),
                       "device_put_received": [[ids, str(got)] for call in received for ids, got in call]}
    return facts


if __name__ == "__main__":
    print(json.dumps(_two_to_two_moves()))
