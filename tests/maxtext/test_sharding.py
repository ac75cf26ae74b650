"""Mesh construction, logical axis rules, and sharded loading/forward/sampling on 8 forced CPU devices.

The multi-device checks run this file as a script in a subprocess: XLA_FLAGS must be set before jax
is imported, and the pytest process has imported jax already.
"""

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARDED_LAYOUT = {"dp": 1, "fsdp": 4, "tp": 2, "pp": 1, "ep": 1, "cp": 1}


def layout(**axes) -> "ParallelConfig":
    from framework.core.parallel import ParallelConfig

    return ParallelConfig(**{"dp": 1, "fsdp": 1, "tp": 1, "pp": 1, "ep": 1, "cp": 1, **axes})


def test_mesh_shape_maps_the_parallel_layout_and_rejects_mismatches():
    from framework.backends.maxtext.sharding import mesh_shape
    from framework.core.errors import ConfigError

    assert mesh_shape(layout(fsdp=-1, tp=2), 8) == {"data": 1, "fsdp": 4, "expert": 1, "tensor": 2}
    with pytest.raises(ConfigError, match=r"parallel: .* uses 6 devices, but 8 are there"):
        mesh_shape(layout(fsdp=3, tp=2), 8)
    with pytest.raises(ConfigError, match="8 devices do not split"):
        mesh_shape(layout(fsdp=-1, tp=3), 8)
    with pytest.raises(ConfigError, match="only one axis may be -1"):
        mesh_shape(layout(dp=-1, fsdp=-1), 8)
    with pytest.raises(ConfigError, match="parallel.pp: 2; backend=maxtext has no pipeline parallelism"):
        mesh_shape(layout(fsdp=-1, pp=2), 8)
    with pytest.raises(ConfigError, match="parallel.cp: 2; backend=maxtext has no context parallelism"):
        mesh_shape(layout(fsdp=-1, cp=2), 8)
    with pytest.raises(ConfigError, match="parallel.ep: 2; backend=maxtext trains dense models .*ep must be 1"):
        mesh_shape(layout(dp=2, fsdp=-1, ep=2), 8)


def test_every_hardware_file_layout_resolves():
    from framework.backends.maxtext.sharding import mesh_shape
    from framework.core.parallel import ParallelConfig

    for path in sorted((REPO / "conf" / "hardware").glob("*.yaml")):
        node = yaml.safe_load(path.read_text())
        devices = node["hardware"]["devices_per_node"] * node["hardware"]["nodes"]
        assert math.prod(mesh_shape(ParallelConfig(**node["parallel"]), devices).values()) == devices, path.name


def test_rules_overrides_and_specs():
    from jax.sharding import AbstractMesh, PartitionSpec

    from framework.backends.maxtext.sharding import DEFAULT_RULES, logical_axis_rules, logical_to_spec
    from framework.core.errors import ConfigError

    assert logical_axis_rules() == DEFAULT_RULES
    rules = logical_axis_rules({"embed": None, "mlp": ["fsdp", "tensor"]})
    assert dict(rules)["embed"] is None and dict(rules)["mlp"] == ("fsdp", "tensor")
    with pytest.raises(ConfigError, match=r"logical_axis_rules.heads: \['model'\] are not mesh axes"):
        logical_axis_rules({"heads": "model"})
    # a logical name no array carries (a typo) was a rule nothing read, silently; the scanned layers' axis is one
    with pytest.raises(ConfigError, match=r"logical_axis_rules.embd: not a logical axis of the models; valid: vocab, "
                                          r"embed, .*, layers$"):
        logical_axis_rules({"embd": "fsdp"})
    assert dict(logical_axis_rules({"layers": None}))["layers"] is None

    assert logical_to_spec(("embed", "heads", "head_dim"), DEFAULT_RULES) == PartitionSpec("fsdp", "tensor", None)
    mesh = AbstractMesh((2, 4, 1, 4), ("data", "fsdp", "expert", "tensor"))
    # 2 KV heads cannot be split 4 ways: replicated over tensor instead of failing.
    assert logical_to_spec(("embed", "kv_heads", "head_dim"), DEFAULT_RULES, (896, 2, 64), mesh) == \
        PartitionSpec("fsdp", None, None)
    assert logical_to_spec(("activation_batch", None), DEFAULT_RULES, (16, 7), mesh) == \
        PartitionSpec(("data", "fsdp"), None)
    assert logical_to_spec(("activation_batch", None), DEFAULT_RULES, (6, 7), mesh) == PartitionSpec("data", None)


def test_single_device_mesh_from_the_cpu_hardware_group():
    import jax

    from framework.backends.maxtext.sharding import build_mesh

    from framework.core.parallel import ParallelConfig

    node = yaml.safe_load((REPO / "conf" / "hardware" / "cpu.yaml").read_text())
    mesh = build_mesh(ParallelConfig(**node["parallel"]), devices=jax.devices()[:1])
    assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}


def test_sharded_load_forward_and_sampling_on_8_devices(tmp_path_factory):
    from framework.models.tiny import build_tiny_model

    model_cfg = yaml.safe_load((REPO / "conf" / "model" / "tiny_qwen2.yaml").read_text())
    model_dir = build_tiny_model(model_cfg, tmp_path_factory.getbasetemp() / "tiny_models" / "tiny_qwen2")
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, 8, str(model_dir), timeout=300)

    assert facts["devices"] == 8
    assert facts["tpu_v5p_mesh"] == {"data": 1, "fsdp": 8, "expert": 1, "tensor": 1}
    specs, shards = facts["specs"], facts["shard_shapes"]
    assert specs["embed_tokens/embedding"] == ["tensor", "fsdp"]  # (vocab, embed)
    # layer parameters: stacked on a leading "layers" axis (scanned layers), never sharded
    assert specs["layers/self_attn/q_proj/kernel"] == [None, "fsdp", "tensor", None]  # (layers, embed, heads, head_dim)
    assert specs["layers/self_attn/q_proj/bias"] == [None, "tensor", None]
    assert specs["layers/self_attn/o_proj/kernel"] == [None, "tensor", None, "fsdp"]
    assert specs["layers/mlp/down_proj/kernel"] == [None, "tensor", "fsdp"]  # (layers, mlp, embed)
    assert specs["layers/input_layernorm/scale"] == [None, None]
    assert shards["embed_tokens/embedding"] == [256, 16]  # 512x64 over tensor=2, fsdp=4
    assert shards["layers/self_attn/k_proj/kernel"] == [2, 16, 1, 16]  # 2 layers x 64x2x16
    assert shards["layers/mlp/gate_proj/kernel"] == [2, 16, 64]
    assert facts["values_equal_unsharded"]
    assert facts["logits_max_abs_diff"] < 1e-4 * facts["logits_max_abs"]
    assert facts["logits_sharded_over"] == ["fsdp", None, "tensor"]
    assert facts["greedy_tokens_equal"]
    assert facts["completions_sharded_over"][0] in ("fsdp", ["data", "fsdp"])  # the batch stays sharded


def _sharded_checks(model_dir: str) -> dict:
    """Runs in the subprocess with 8 host devices."""
    import jax
    import numpy as np

    from framework.backends.maxtext.checkpoint_io import load_hf_params
    from framework.backends.maxtext.models import ModelConfig, Transformer, forward
    from framework.backends.maxtext.sampler import Sampler, SamplingParams
    from framework.backends.maxtext.sharding import build_mesh, logical_axis_rules

    from framework.core.parallel import ParallelConfig

    tpu = yaml.safe_load((REPO / "conf" / "hardware" / "tpu_v5p.yaml").read_text())
    config = ModelConfig.from_pretrained(model_dir)
    mesh, rules = build_mesh(ParallelConfig(**SHARDED_LAYOUT)), logical_axis_rules()
    sharded = load_hf_params(model_dir, config, mesh, rules)
    unsharded = load_hf_params(model_dir, config)
    flat_sharded = {"/".join(k.key for k in path): leaf
                    for path, leaf in jax.tree_util.tree_flatten_with_path(sharded)[0]}
    values_equal = all(np.array_equal(np.asarray(a), np.asarray(b))
                       for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(unsharded)))

    # Noise on every tensor (HF init has zero biases and unit norms), identical on both layouts.
    noise = np.random.default_rng(0)
    perturbed = jax.tree.map(lambda x: np.asarray(x) + noise.normal(0, 0.1, x.shape).astype(np.float32), unsharded)
    unsharded = jax.device_put(perturbed)
    sharded = jax.tree.map(lambda x, s: jax.device_put(x, s.sharding), perturbed, sharded)

    ids = np.random.default_rng(1).integers(3, 512, size=(8, 12))
    mask = np.ones_like(ids)
    mask[3, :5] = 0
    sharded_model, plain_model = Transformer(config, mesh, rules), Transformer(config)
    logits_sharded, _ = jax.jit(lambda p: forward(sharded_model, p, ids, mask))(sharded)
    logits_plain, _ = jax.jit(lambda p: forward(plain_model, p, ids, mask))(unsharded)

    # Sharded greedy decoding must pick the argmax of the unsharded model at every step (teacher forcing).
    prompts = [row[:n].tolist() for row, n in zip(ids, [3, 5, 7, 9, 12, 4, 6, 8])]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0, num_samples=2)
    sampled = Sampler(sharded_model, eos_token_ids=[2], pad_token_id=0, prompt_bucket=4).generate(
        sharded, prompts, jax.random.key(0), greedy)
    sequence = np.concatenate([np.asarray(sampled.prompt_ids), np.asarray(sampled.completion_ids)], axis=1)
    sequence_mask = np.concatenate([np.asarray(sampled.prompt_mask), np.ones((16, 8), int)], axis=1)
    teacher_logits, _ = jax.jit(lambda p: forward(plain_model, p, sequence, sequence_mask))(unsharded)
    argmax = np.asarray(teacher_logits).argmax(-1)[:, 11:-1]
    completion_mask = np.asarray(sampled.completion_mask).astype(bool)
    return {
        "devices": len(jax.devices()),
        "tpu_v5p_mesh": dict(build_mesh(ParallelConfig(**tpu["parallel"])).shape),
        "specs": {name: list(leaf.sharding.spec) + [None] * (leaf.ndim - len(leaf.sharding.spec))
                  for name, leaf in flat_sharded.items()},
        "shard_shapes": {name: list(leaf.addressable_shards[0].data.shape) for name, leaf in flat_sharded.items()},
        "values_equal_unsharded": values_equal,
        "logits_max_abs_diff": float(np.abs(np.asarray(logits_sharded) - np.asarray(logits_plain)).max()),
        "logits_max_abs": float(np.abs(np.asarray(logits_plain)).max()),
        "logits_sharded_over": list(logits_sharded.sharding.spec),
        "greedy_tokens_equal": bool(np.array_equal(np.asarray(sampled.completion_ids)[completion_mask],
                                                   argmax[completion_mask])),
        "completions_sharded_over": list(sampled.completion_ids.sharding.spec),
    }


if __name__ == "__main__":
    print(json.dumps(_sharded_checks(sys.argv[1])))


def test_cast_floating_casts_float_leaves_and_keeps_integer_ones_and_tree_bytes_counts_them():
    import jax.numpy as jnp

    from framework.backends.maxtext.sharding import cast_floating, tree_bytes

    tree = {"w": jnp.ones((2, 3), jnp.float32), "step": jnp.int32(7)}
    cast = cast_floating(tree, "bfloat16")
    assert cast["w"].dtype == jnp.bfloat16 and cast["step"].dtype == jnp.int32 and int(cast["step"]) == 7
    assert tree_bytes(tree) == 2 * 3 * 4 + 4 and tree_bytes(cast) == 2 * 3 * 2 + 4
