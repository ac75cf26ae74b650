"""The weight move between the update's and the rollout's devices (sharding.resharder), on forced CPU
devices: 2 | 2, 2 -> 1, 4 -> 2 and 4 -> 1 take the staged device-to-device path, 4 -> 3 the plain device_put.

The checks run this file as a script in a subprocess (XLA_FLAGS before jax is imported).
"""

from __future__ import annotations

import functools
import json
import sys

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


@functools.cache
def _fsdp4_facts() -> dict:
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    return facts_on_cpu_devices(__file__, 8, "fsdp4", timeout=300)


def test_fsdp_4_to_a_two_device_tp_2_group_stages_on_the_first_two_update_devices():
    """4 -> 2: two copies of the tp=2 layout staged (devices 4, 5 and 6, 7); the first pair's shards move to 0, 1."""
    facts = _fsdp4_facts()["tp2"]
    assert facts == {"equal": True, "target_sharding": True, "path": "staged_copy",
                     "staging_copies_device_to_device": True,
                     "device_put_received": [[[4, 5], "P(None, 'tensor')"]]}, facts


def test_fsdp_4_to_a_one_device_group_stages_a_whole_copy_on_the_first_update_device():
    """4 -> 1: four whole cast copies staged (one per update device); device 4's is copied to device 0."""
    facts = _fsdp4_facts()["one"]
    assert facts == {"equal": True, "target_sharding": True, "path": "staged_copy",
                     "staging_copies_device_to_device": True, "device_put_received": [[[4], "P()"]]}, facts


def test_fsdp_4_to_three_devices_falls_back_to_device_put_of_the_cast_update_shards():
    """4 -> 3: 3 does not divide 4, so nothing is staged: jax.device_put gets the cast arrays in the update's layout."""
    facts = _fsdp4_facts()["three"]
    assert facts == {"equal": True, "target_sharding": True, "path": "device_put",
                     "device_put_received": [[[4, 5, 6, 7], "P('fsdp', None)"]]}, facts


def _two_to_two_moves() -> dict:
    """sharding.resharder from fsdp=2 on devices 2, 3 to a rollout mesh on devices 0, 1: (values equal the
    cast, shardings the target's, an equal staging sharding: jax copies device to device, not via the host,
    the staged path ran: its one jax.device_put got arrays already in the target's layout on the update's devices);
    and from devices 2, 3 to device 0 alone (a count dividing the source's): one cast copy laid out on each
    target-sized slice of the update's devices (here whole on 2 and on 3), the first slice's copied to device 0."""
    import jax
    from jax.sharding import PartitionSpec

    devices = jax.devices()
    weights = np.arange(64 * 8, dtype=np.float32).reshape(64, 8) / 7
    return _moves(devices[2:4], weights, (("dp2", {"dp": 2, "tp": 1}, PartitionSpec(), devices[:2]),
                                          ("tp2", {"dp": 1, "tp": 2}, PartitionSpec(None, "tensor"), devices[:2]),
                                          ("one", {"dp": 1, "tp": 1}, PartitionSpec(), devices[:1])))


def _fsdp4_moves() -> dict:
    """From fsdp=4 on devices 4..7 to tp=2 on 0, 1 (staged), to device 0 (staged) and to tp=3 on 0..2 (3 does
    not divide 4: device_put)."""
    import jax
    from jax.sharding import PartitionSpec

    devices = jax.devices()
    weights = np.arange(48 * 12, dtype=np.float32).reshape(48, 12) / 7
    return _moves(devices[4:8], weights, (("tp2", {"dp": 1, "tp": 2}, PartitionSpec(None, "tensor"), devices[:2]),
                                          ("one", {"dp": 1, "tp": 1}, PartitionSpec(), devices[:1]),
                                          ("three", {"dp": 1, "tp": 3}, PartitionSpec(None, "tensor"), devices[:3])))


def _moves(update_devices: list, weights: np.ndarray, cases: tuple) -> dict:
    """Per (name, rollout axes, spec, rollout devices): resharder from fsdp over `update_devices` (float32) to that
    target (bfloat16); what each move handed jax.device_put; for a staged move, whether the first slice's staging
    sharding equals the target's (jax then copies device to device)."""
    import jax
    from jax._src.array import _sharding_indices_and_eq
    from jax.sharding import NamedSharding, PartitionSpec

    from framework.backends.maxtext.sharding import build_mesh, resharder
    from framework.core.parallel import ParallelConfig

    facts, received = {}, []
    plain_device_put = jax.device_put

    def recording_device_put(tree, target=None, **kwargs):  # what each move hands jax.device_put
        received.append([(sorted(d.id for d in x.sharding.device_set), x.sharding.spec) for x in jax.tree.leaves(tree)])
        return plain_device_put(tree, target, **kwargs)

    source = build_mesh(ParallelConfig(dp=1, fsdp=len(update_devices), tp=1, pp=1, ep=1, cp=1), update_devices)
    staged = jax.jit(lambda x: x, out_shardings=NamedSharding(source, PartitionSpec("fsdp", None)))(weights)
    for name, axes, spec, targets in cases:
        target = NamedSharding(build_mesh(ParallelConfig(fsdp=1, pp=1, ep=1, cp=1, **axes), targets), spec)
        move = resharder(source, {"w": target}, "bfloat16")
        received.clear()
        jax.device_put = recording_device_put
        try:
            moved = move({"w": staged})["w"]
        finally:
            jax.device_put = plain_device_put
        facts[name] = {"equal": bool(np.array_equal(np.asarray(moved), weights.astype(moved.dtype))),
                       "target_sharding": moved.sharding == target, "path": move.path,
                       "device_put_received": [[ids, str(got)] for call in received for ids, got in call]}
        if move.path == "staged_copy":  # the staged copy on the first target-sized slice
            first = source.devices.flat[:len(targets)]
            staging = NamedSharding(jax.sharding.Mesh(np.array(first).reshape(target.mesh.devices.shape),
                                                      target.mesh.axis_names), spec)
            facts[name]["staging_copies_device_to_device"] = bool(_sharding_indices_and_eq(staging, target, 2))
    return facts


if __name__ == "__main__":
    print(json.dumps(_fsdp4_moves() if sys.argv[1:] == ["fsdp4"] else _two_to_two_moves()))
