"""Model FLOPs of a GRPO update (forward + backward over one batch), from HF config fields.

Per token: 6 x the matmul parameters of the decoder layers (q, k, v, o, gate, up, down) plus
12 x layers x (heads x head_dim) x sequence length for attention (PaLM's convention); plus
6 x hidden x vocab for the LM head on completion tokens only (the update needs no logits at prompt
positions; both benchmarked trainers skip them). Used by grpo_step.py and trl_grpo_step.py alike.
"""

from __future__ import annotations

from typing import Any, Mapping


def grpo_update_flops(hf_config: Mapping[str, Any], rows: int, prompt_tokens: int, new_tokens: int) -> float:
    hidden, layers = hf_config["hidden_size"], hf_config["num_hidden_layers"]
    heads = hf_config["num_attention_heads"]
    kv_heads = hf_config.get("num_key_value_heads") or heads
    head_dim = hf_config.get("head_dim") or hidden // heads
    attention_proj = hidden * head_dim * (2 * heads + 2 * kv_heads)
    mlp = 3 * hidden * hf_config["intermediate_size"]
    sequence = prompt_tokens + new_tokens
    per_token = 6 * layers * (attention_proj + mlp) + 12 * layers * heads * head_dim * sequence
    lm_head = 6 * hidden * hf_config["vocab_size"] * rows * new_tokens
    return float(per_token * rows * sequence + lm_head)
