"""Core attention of the `local_sdpa` layer spec: megatron's local modules, attention through torch SDPA.

megatron's local DotProductAttention materialises the [b, heads, s, s] scores (baddbmm, softmax,
bmm); without Transformer Engine that is the slowest and largest part of a step at long sequences.
This subclass keeps its interface and settings (scale, causal mask, GQA) and calls
`torch.nn.functional.scaled_dot_product_attention`, which picks flash or memory-efficient kernels
on GPUs and the exact math path on a CPU.
"""

from __future__ import annotations

from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType


class SDPAttention(DotProductAttention):
    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        import torch.nn.functional as F

        if packed_seq_params is not None or attention_bias is not None or attention_mask is not None:
            raise NotImplementedError("local_sdpa attention is causal self-attention without masks or packing; "
                                      "use layer_spec=local or te")
        if (attn_mask_type or self.attn_mask_type) != AttnMaskType.causal:
            raise NotImplementedError("local_sdpa attention supports the causal mask only")
        groups = self.num_attention_heads_per_partition // self.num_query_groups_per_partition
        if groups > 1:  # GQA: every query head sees its group's key and value (as DotProductAttention does)
            key, value = key.repeat_interleave(groups, dim=2), value.repeat_interleave(groups, dim=2)
        # [s, b, heads, head_dim] -> [b, heads, s, head_dim]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        dropout = self.config.attention_dropout if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=self.softmax_scale)
        # [b, heads, s, head_dim] -> [s, b, heads * head_dim]
        return context.permute(2, 0, 1, 3).reshape(context.size(2), context.size(0), -1)
