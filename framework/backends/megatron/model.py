"""An HF decoder config (Llama, Qwen2, Qwen3) as megatron-core's TransformerConfig and GPTModel.

What maps: GQA (num_key_value_heads -> num_query_groups), head_dim (kv_channels), RoPE theta and
Llama-3 rope scaling, SwiGLU (gated_linear_unit + silu), RMSNorm, tied or untied embeddings,
QK-norm (Qwen3: RMSNorm on each head's q and k), qkv bias (Qwen2). A layout that does not divide
the heads, query groups, layers or vocabulary is a ConfigError before anything is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from framework.core.errors import ConfigError, DataError
from framework.models.hf_config import DecoderArchitecture, read_decoder

LAYER_SPECS = ("local", "local_sdpa", "te")
LLAMA31_ROPE = (1.0, 4.0, 8192)  # low_freq_factor, high_freq_factor, original_max_position_embeddings


@dataclass(frozen=True)
class DecoderShape:
    """The architecture fields megatron needs, read from an HF config.json."""

    model_type: str
    vocab_size: int
    hidden_size: int
    ffn_hidden_size: int
    num_layers: int
    num_heads: int
    num_query_groups: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling_factor: float | None  # Llama-3 rope scaling; None = plain RoPE
    max_position_embeddings: int
    tie_embeddings: bool
    qkv_bias: bool
    qk_norm: bool


def decoder_shape(hf: Mapping[str, Any]) -> DecoderShape:
    arch = read_decoder(hf, "megatron")
    for key, present in (("attention_bias", arch.o_bias), ("mlp_bias", arch.mlp_bias)):
        if present:  # the GPT layers here have biases on q/k/v only (add_bias_linear=False)
            raise ConfigError(f"model.hf_config.{key}: true does not run on backend=megatron (biases on q/k/v "
                              f"only); valid: false")
    return DecoderShape(
        model_type=arch.model_type, vocab_size=arch.vocab_size, hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.intermediate_size, num_layers=arch.num_layers, num_heads=arch.num_heads,
        num_query_groups=arch.num_kv_heads, head_dim=arch.head_dim, rms_norm_eps=arch.rms_norm_eps,
        rope_theta=arch.rope_theta, rope_scaling_factor=llama3_factor(arch),
        max_position_embeddings=arch.max_position_embeddings, tie_embeddings=arch.tie_word_embeddings,
        qkv_bias=arch.qkv_bias, qk_norm=arch.qk_norm)


def llama3_factor(arch: DecoderArchitecture) -> float | None:
    """megatron's rope scaling takes the factor and fixes the rest at Llama 3.1's values; others are refused."""
    if arch.rope_llama3 is None:
        return None
    factor, low, high, original = arch.rope_llama3
    if (low, high, original) != LLAMA31_ROPE:
        raise ConfigError(f"model.hf_config.rope_scaling: llama3 low/high_freq_factor and "
                          f"original_max_position_embeddings {(low, high, original)} do not run on backend=megatron; "
                          f"valid: {LLAMA31_ROPE} (megatron-core fixes them)")
    return factor


def read_hf_config(model_dir: str | Path) -> dict:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise DataError(f"model.path: {model_dir} has no config.json (backend=megatron reads a local HF model "
                        f"directory)")
    return json.loads(path.read_text())


def check_layout(shape: DecoderShape, tp: int, pp: int, key: str = "parallel") -> None:
    """ConfigError (one line) when tp/pp do not divide what they split."""
    for what, count in (("num_attention_heads", shape.num_heads), ("num_key_value_heads", shape.num_query_groups),
                        ("vocab_size", shape.vocab_size), ("intermediate_size", shape.ffn_hidden_size)):
        if count % tp:
            raise ConfigError(f"{key}.tp: {tp} does not divide the model's {what} ({count}); use a tp that does")
    if shape.num_layers % pp:
        raise ConfigError(f"{key}.pp: {pp} does not divide the model's num_hidden_layers ({shape.num_layers}); "
                          f"use a pp that does")


def transformer_config(shape: DecoderShape, layout: Mapping[str, int], compute_dtype: str, on_gpu: bool,
                       spec_kind: str = "local"):
    """megatron's TransformerConfig for `shape` under `layout` (tp, pp, cp) in `compute_dtype`.

    Sequence parallelism only with the TE spec: megatron's local (torch) norms refuse it."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    from framework.core.dtypes import torch_dtype

    dtype = torch_dtype(compute_dtype)
    return TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size, ffn_hidden_size=shape.ffn_hidden_size,
        num_attention_heads=shape.num_heads, num_query_groups=shape.num_query_groups, kv_channels=shape.head_dim,
        normalization="RMSNorm", layernorm_epsilon=shape.rms_norm_eps, gated_linear_unit=True,
        activation_func=F.silu, add_bias_linear=False, add_qkv_bias=shape.qkv_bias, qk_layernorm=shape.qk_norm,
        hidden_dropout=0.0, attention_dropout=0.0, init_method_std=0.02,
        tensor_model_parallel_size=layout["tp"], pipeline_model_parallel_size=layout["pp"],
        context_parallel_size=layout["cp"], sequence_parallel=on_gpu and layout["tp"] > 1 and spec_kind == "te",
        params_dtype=dtype, pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        use_cpu_initialization=not on_gpu, perform_initialization=True,
        # fused kernels need apex, TE or Megatron-LM's compiled CUDA extensions (not in the megatron-core wheel)
        bias_dropout_fusion=False, apply_rope_fusion=False, masked_softmax_fusion=False,
        gradient_accumulation_fusion=False, persist_layer_norm=False,
        deallocate_pipeline_outputs=on_gpu)


def layer_spec(shape: DecoderShape, kind: str):
    """The transformer layer spec: `local` (megatron's own modules), `local_sdpa` (the same with torch SDPA
    core attention, framework/backends/megatron/attention.py) or `te` (Transformer Engine)."""
    from megatron.core.models.gpt import gpt_layer_specs

    if kind == "te":
        try:
            import transformer_engine  # noqa: F401
        except ImportError:
            raise ConfigError("backend.adapter.layer_spec: te needs Transformer Engine (pip install "
                              "transformer-engine[pytorch]); use local") from None
        return gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(qk_layernorm=shape.qk_norm)
    if kind in ("local", "local_sdpa"):
        spec = gpt_layer_specs.get_gpt_layer_local_spec(qk_layernorm=shape.qk_norm, normalization="RMSNorm")
        if kind == "local_sdpa":
            from framework.backends.megatron.attention import SDPAttention

            spec.submodules.self_attention.submodules.core_attention = SDPAttention
        return spec
    raise ConfigError(f"backend.adapter.layer_spec: {kind!r}; valid: {', '.join(LAYER_SPECS)}")


def gpt_model(shape: DecoderShape, config, spec, seq_length: int, pre_process: bool, post_process: bool):
    from megatron.core.models.gpt import GPTModel

    theta = int(shape.rope_theta) if float(shape.rope_theta).is_integer() else shape.rope_theta
    return GPTModel(config, spec, vocab_size=shape.vocab_size,
                    max_sequence_length=max(seq_length, shape.max_position_embeddings),
                    pre_process=pre_process, post_process=post_process,
                    share_embeddings_and_output_weights=shape.tie_embeddings, position_embedding_type="rope",
                    rotary_base=theta, rope_scaling=shape.rope_scaling_factor is not None,
                    rope_scaling_factor=shape.rope_scaling_factor or 8.0)
