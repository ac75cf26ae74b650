"""Weights between HF decoder checkpoints (Llama, Qwen2, Qwen3) and megatron-core's GPTModel.

One table names, for every megatron parameter of a layer (local spec, and the TE spec's fused norm
names), its HF source; QKV is packed per query group ([q of the group's heads, k, v]), the SwiGLU
fc1 is [gate; up]. Tensor parallelism splits column-parallel weights on dim 0 (fc1 as gate and up
separately), row-parallel weights on dim 1; norms are whole on every rank. Pipeline stages hold
consecutive layers. Import slices the HF tensors for this rank; export gathers every rank's part
to global rank 0 and writes `model.safetensors` beside the source directory's config and tokenizer.
"""

from __future__ import annotations

import shutil
from pathlib import Path

QKV, FC1 = "qkv", "fc1"
# megatron name inside decoder.layers.N -> HF name inside model.layers.N (or a packed kind)
LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.linear_qkv.weight": (QKV, "weight"),
    "self_attention.linear_qkv.bias": (QKV, "bias"),
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "post_attention_layernorm.weight",
    "mlp.linear_fc1.weight": (FC1, "weight"),
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
}
COLUMN = ("linear_qkv.weight", "linear_qkv.bias", "linear_fc1.weight", "word_embeddings.weight", "output_layer.weight")
ROW = ("linear_proj.weight", "linear_fc2.weight")
SKIP = ("_extra_state",)


def split_dim(name: str) -> int | None:
    if name.endswith(COLUMN):
        return 0
    if name.endswith(ROW):
        return 1
    return None


def pack_qkv(q, k, v, shape):
    groups, per_group = shape.num_query_groups, shape.num_heads // shape.num_query_groups
    rest = q.shape[1:]
    q = q.reshape(groups, per_group * shape.head_dim, *rest)
    k, v = k.reshape(groups, shape.head_dim, *rest), v.reshape(groups, shape.head_dim, *rest)
    import torch

    return torch.cat([q, k, v], dim=1).reshape(-1, *rest)


def unpack_qkv(qkv, shape):
    groups, per_group = shape.num_query_groups, shape.num_heads // shape.num_query_groups
    rest = qkv.shape[1:]
    grouped = qkv.reshape(groups, (per_group + 2) * shape.head_dim, *rest)
    q, k, v = grouped.split([per_group * shape.head_dim, shape.head_dim, shape.head_dim], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


def hf_source(name: str, layer_offset: int, shape):
    """(kind, hf names) of a local megatron parameter: kind 'plain', QKV or FC1; None to skip."""
    if name.endswith(SKIP) or "rotary" in name:
        return None
    if name == "embedding.word_embeddings.weight":
        return "plain", ["model.embed_tokens.weight"]
    if name == "decoder.final_layernorm.weight":
        return "plain", ["model.norm.weight"]
    if name == "output_layer.weight":
        return "plain", ["model.embed_tokens.weight" if shape.tie_embeddings else "lm_head.weight"]
    parts = name.split(".")
    if parts[:2] != ["decoder", "layers"] or ".".join(parts[3:]) not in LAYER:
        raise KeyError(f"no HF name for megatron parameter {name}")
    prefix = f"model.layers.{int(parts[2]) + layer_offset}."
    target = LAYER[".".join(parts[3:])]
    if target[0] == QKV:
        return QKV, [f"{prefix}self_attn.{p}_proj.{target[1]}" for p in "qkv"]
    if target[0] == FC1:
        return FC1, [f"{prefix}mlp.gate_proj.weight", f"{prefix}mlp.up_proj.weight"]
    return "plain", [prefix + target]


def shard(full, name: str, rank: int, size: int):
    dim = split_dim(name)
    return full if dim is None or size == 1 else full.chunk(size, dim=dim)[rank]


def local_from_hf(name: str, hf: dict, layer_offset: int, shape, tp_rank: int, tp: int):
    """This rank's tensor of megatron parameter `name` from the HF tensors `hf`; None to skip."""
    import torch

    source = hf_source(name, layer_offset, shape)
    if source is None:
        return None
    kind, names = source
    if kind == QKV:
        return shard(pack_qkv(*(hf[n] for n in names), shape), name, tp_rank, tp)
    if kind == FC1:
        gate, up = (shard(hf[n], name, tp_rank, tp) for n in names)
        return torch.cat([gate, up], dim=0)
    return shard(hf[names[0]], name, tp_rank, tp)


def hf_from_parts(name: str, parts: list, layer_offset: int, shape) -> dict:
    """The HF tensors of megatron parameter `name` from its tp parts (in tp rank order)."""
    import torch

    source = hf_source(name, layer_offset, shape)
    if source is None or (name == "output_layer.weight" and shape.tie_embeddings):
        return {}
    kind, names = source
    dim = split_dim(name)
    if kind == FC1:
        halves = [p.chunk(2, dim=0) for p in parts]
        return {names[0]: torch.cat([h[0] for h in halves]), names[1]: torch.cat([h[1] for h in halves])}
    full = parts[0] if dim is None else torch.cat(parts, dim=dim)
    if kind == QKV:
        return dict(zip(names, unpack_qkv(full, shape)))
    return {names[0]: full}


def read_hf_weights(model_dir: str) -> dict:
    from safetensors.torch import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        from framework.core.errors import DataError

        raise DataError(f"model.path: {model_dir} has no *.safetensors weights (pretrain.init_from=pretrained)")
    weights = {}
    for file in files:
        weights.update(load_file(str(file)))
    return weights


def write_hf_export(tensors: dict, source_dir: str, out_dir: Path, dtype) -> Path:
    """`model.safetensors` of `tensors` plus the source directory's config, generation config and tokenizer."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    for file in Path(source_dir).iterdir():
        if file.is_file() and not file.name.endswith((".safetensors", ".safetensors.index.json", ".bin")) \
                and not file.name.startswith("crucible_"):
            shutil.copy2(file, out_dir / file.name)
    save_file({k: v.to(dtype).contiguous() for k, v in sorted(tensors.items())}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    return out_dir
