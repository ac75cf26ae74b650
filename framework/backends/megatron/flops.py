"""Model FLOPs per trained token of a decoder (the MFU numerator), PaLM's convention.

6 x the matmul parameters of the layers (q, k, v, o, gate, up, down) and of the LM head, plus
12 x layers x heads x head_dim x sequence for attention scores and values (causal masking not
subtracted, as Megatron-LM and PaLM count it). The benchmark and the trainer both use this.
"""

from __future__ import annotations


def train_flops_per_token(shape, seq_length: int) -> float:
    attention_proj = shape.hidden_size * shape.head_dim * (2 * shape.num_heads + 2 * shape.num_query_groups)
    mlp = 3 * shape.hidden_size * shape.ffn_hidden_size
    matmul_params = shape.num_layers * (attention_proj + mlp) + shape.hidden_size * shape.vocab_size
    attention = 12 * shape.num_layers * shape.num_heads * shape.head_dim * seq_length
    return float(6 * matmul_params + attention)
