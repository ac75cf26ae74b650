"""The GRPO trainer's null rollout tp (GRPOTrainer._rollout_placements) on 4 forced CPU devices: the tp it picks
is rollout_plan.rollout_tp_for's over the candidate meshes sharding.rollout_meshes builds (the cache's batch shards
counted on them), and the mesh it builds is that candidate, where prompt_decision decides as the plan assumed.

The trainer's part runs as this file's script in a subprocess: XLA_FLAGS must be set before jax is imported, and
the pytest process has imported jax already.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.maxtext.test_rollout_layouts import grpo_task, rollout_layout

DEVICES = 4
# 16 prompts x 8 of 1024 + 256 tokens, 256 KiB of K/V a token, 16 GB of float32 weights
MODEL = SimpleNamespace(num_layers=64, num_heads=64, num_kv_heads=8, head_dim=128, dtype="bfloat16",
                        param_dtype="float32", decode_kernel="pallas", shared_prefix="auto")
WEIGHT_BYTES = 16e9
TASK_OVERRIDES = ("grpo.prompts_per_step=16", "grpo.max_prompt_tokens=1024", "grpo.max_new_tokens=256",
                  "grpo.micro_batch_size=32")
# name -> (the rollout layout, its devices (the first ones; the rest train when fewer), hardware memory_gb).
# shared: dp=2 fixed and fsdp=-1 leave 2 devices for tp; at tp=1 the cache splits over 4 batch shards (rollout_meshes)
# and fits in 40 GB, over the 2 of a data x tensor mesh of those 2 devices it would not (tp=2).
# separate: the rollout decodes on 2 devices of its own, the update on the other 2 (fsdp=2); no training state
# stays on them, so tp=1 fits in 60 GB where a shared rollout beside it would need tp=2.
CASES = {"shared": (dict(dp=2, fsdp=-1), DEVICES, 40), "separate": (dict(placement="separate", devices=2), 2, 60)}


def _cases():
    return {name: (rollout_layout(**axes), count, memory_gb) for name, (axes, count, memory_gb) in CASES.items()}


def test_the_trainer_picks_the_rollout_tp_the_plan_says_for_its_candidate_meshes():
    from framework.backends.maxtext.sharding import DEFAULT_RULES, abstract_mesh, rollout_meshes
    from framework.backends.maxtext.trainers.rollout_plan import prompt_decision, rollout_tp_for
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, DEVICES, timeout=300)
    task = grpo_task(*TASK_OVERRIDES)
    for name, (chosen, count, memory_gb) in _cases().items():
        separate, free = count < DEVICES, count // max(chosen.dp, 1)
        update = {"data": 1, "fsdp": DEVICES - count if separate else DEVICES, "expert": 1, "tensor": 1}
        meshes = rollout_meshes(chosen, count)
        planned = rollout_tp_for(MODEL, WEIGHT_BYTES, update, task, memory_gb, free, separate, meshes, DEFAULT_RULES)
        fact = facts[name]
        assert fact["tp"] == planned, name
        assert fact["mesh"] == meshes(planned), name
        assert fact["shares_prompt"] == list(prompt_decision(MODEL, task, abstract_mesh(meshes(planned)),
                                                             DEFAULT_RULES)), name
        # the cases tell the trainer's arguments apart: without the candidate meshes, or with the other placement
        other = (rollout_tp_for(MODEL, WEIGHT_BYTES, update, task, memory_gb, free, separate) if name == "shared" else
                 rollout_tp_for(MODEL, WEIGHT_BYTES, update, task, memory_gb, free, False, meshes, DEFAULT_RULES))
        assert other != planned, name


def _trainer_facts() -> dict:
    """The trainer's rollout placement in each case, on this process's forced CPU devices."""
    import jax
    from flax import linen as nn

    from framework.backends.maxtext.sharding import DEFAULT_RULES, build_mesh
    from framework.backends.maxtext.trainers.grpo import GRPOTrainer
    from framework.backends.maxtext.trainers.rollout_plan import prompt_decision
    from framework.core.parallel import ParallelConfig

    devices, task, facts = jax.devices(), grpo_task(*TASK_OVERRIDES), {}
    # one small parameter: the placement shards it; the layout and mesh are what counts here
    boxed = {"w": nn.LogicallyPartitioned(jax.ShapeDtypeStruct((64, 64), "float32"), ("embed", "mlp"))}
    for name, (chosen, count, memory_gb) in _cases().items():
        trainer = GRPOTrainer.__new__(GRPOTrainer)  # only what _rollout_placements reads
        parallel = ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1, rollout=chosen)
        trainer.config = SimpleNamespace(parallel=parallel, task=task, hardware={"memory_gb": memory_gb})
        trainer.rollout_devices = devices[:count]
        trainer.devices = devices[count:] if count < len(devices) else devices
        trainer.mesh = build_mesh(parallel, trainer.devices)
        trainer.model_config, trainer.weight_bytes, trainer.rules = MODEL, WEIGHT_BYTES, DEFAULT_RULES
        placement = trainer._rollout_placements(boxed)[0]
        facts[name] = {"tp": placement.layout.tp, "mesh": dict(placement.mesh.shape),
                       "shares_prompt": list(prompt_decision(MODEL, task, placement.mesh, DEFAULT_RULES))}
    return facts


if __name__ == "__main__":
    print(json.dumps(_trainer_facts()))
