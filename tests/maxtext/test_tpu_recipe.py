"""The TPU recipe composes, and its fsdp x tensor sharding trains on a CPU mesh of 8 forced host devices.

We have no TPU: the run swaps the 7B model for the tiny one, the 4-host slice for one host of 8
devices and the hub data set for the shipped sample; the mesh axes stay the recipe's (fsdp=-1, tensor=4).
"""

from __future__ import annotations

import json

import pytest

from framework.core.loggers import read_metrics
from framework.core.runtime import validate
from tests.conftest import compose_config, run_cli

pytest.importorskip("jax")

FORCED_CPU = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
ON_CPU = ["recipe=grpo_gsm8k_tpu", "model=tiny_qwen2", "data=gsm8k_sample", "hardware.nodes=1",
          "hardware.devices_per_node=8", "grpo.steps=2", "grpo.prompts_per_step=4", "grpo.num_generations=4",
          "grpo.max_prompt_tokens=384", "grpo.max_new_tokens=16", "grpo.micro_batch_size=8",
          "grpo.logprob_chunk_size=16",
          "grpo.eval.every=0", "grpo.checkpoint.every=0", "grpo.export_hf=false", "progress=false"]
# Logical axes of each parameter (models/transformer.py) -> mesh axes by sharding.DEFAULT_RULES on
# fsdp=2 x tensor=4. tiny_qwen2 has 4 query heads but 2 KV heads: 2 does not split 4 ways, so K/V
# heads are replicated over `tensor` (sharding.py drops uneven axes).
EXPECTED_SPECS = {
    "embed_tokens/embedding": ["tensor", "fsdp"],  # vocab, embed
    # layer parameters are stacked on a leading, unsharded "layers" axis (the layers are scanned)
    "layers/self_attn/q_proj/kernel": [None, "fsdp", "tensor", None],  # layers, embed, heads, head_dim
    "layers/self_attn/q_proj/bias": [None, "tensor", None],
    "layers/self_attn/k_proj/kernel": [None, "fsdp", None, None],  # layers, embed, kv_heads (2), head_dim
    "layers/self_attn/o_proj/kernel": [None, "tensor", None, "fsdp"],  # layers, heads, head_dim, embed
    "layers/mlp/gate_proj/kernel": [None, "fsdp", "tensor"],  # layers, embed, mlp
    "layers/mlp/down_proj/kernel": [None, "tensor", "fsdp"],  # layers, mlp, embed
    "norm/scale": [None],
}


def test_tpu_recipe_composes_for_a_v5p_slice():
    cfg = compose_config(["recipe=grpo_gsm8k_tpu"])
    validate(cfg)
    assert (cfg.backend.name, cfg.task.name, cfg.hardware.name, cfg.model.name) == ("maxtext", "grpo", "tpu_v5p",
                                                                                     "qwen2_5_7b")
    assert cfg.hardware.nodes * cfg.hardware.devices_per_node == 16  # v5p-32: 16 chips on 4 hosts
    assert {axis: size for axis, size in cfg.parallel.items() if axis != "rollout"} == \
        {"dp": 1, "fsdp": -1, "tp": 4, "pp": 1, "ep": 1, "cp": 1}
    assert cfg.grpo.compute_dtype == "bfloat16"
    assert (cfg.grpo.prompts_per_step * cfg.grpo.num_generations) % cfg.grpo.micro_batch_size == 0


@pytest.mark.slow
def test_tpu_recipe_shards_fsdp_by_tensor_on_8_cpu_devices(tmp_path):
    proc = run_cli([*ON_CPU, f"hydra.run.dir={tmp_path}"], env=FORCED_CPU)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mesh {'data': 1, 'fsdp': 2, 'expert': 1, 'tensor': 4} over 8 cpu device(s)" in proc.stderr
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]

    shardings = json.loads((tmp_path / "shardings.json").read_text())  # of the params after training
    assert shardings["mesh"] == {"data": 1, "fsdp": 2, "expert": 1, "tensor": 4} and shardings["devices"] == 8
    for name, spec in EXPECTED_SPECS.items():
        assert shardings["params"][name] == spec, name
