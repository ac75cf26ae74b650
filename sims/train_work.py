"""Training work outside the graph's nodes, in bytes and FLOPs per parameter or logit: the optimizer
step (AdamW with clipping), gradient accumulation, the loss over the vocabulary, and the backward's
default cost when a table has no measured backward kernels (sims/step.py adds them to a step)."""

from __future__ import annotations

# Adam per parameter: read fp32 grad (4), read+write fp32 master (8), m and v (16), write the
# low-precision weight (2). In fp32 training the weight is the master copy (no extra write).
ADAM_BYTES_PER_PARAM = {"bf16": 30, "fp8": 30, "fp32": 28}
GRAD_BYTES = 4  # gradients accumulated and reduced in fp32 (Megatron's main_grad)
# Per parameter and micro-batch: each backward's bf16 weight gradient read and added into the fp32
# main grad (read + write): Megatron's DDP hook without gradient-accumulation fusion.
GRAD_ACCUMULATE_BYTES = 10
CLIP_BYTES_PER_PARAM = 12  # clipping by the global norm: read every fp32 grad, then scale it in place
TRAIN_BACKWARD_FACTOR = 2  # backward = 2x forward FLOPs; its time without measured backward kernels
LOSS_FLOPS_PER_LOGIT = 5  # max, subtract, exp, sum, divide
# The rows a training step adds outside the graph's nodes (sims/step.py): each has its own measured curve
# and backward ratio, never stands in for a graph op's class.
OUTSIDE_GRAPH_OPS = ("cross_entropy", "grad_accumulate", "optimizer_step")


def loss_work(logit_tokens: float, vocab: int, tp: int, act_bytes: int) -> tuple[float, float]:
    """(FLOPs, bytes) of the cross-entropy forward over one device's vocabulary shard: the logits read
    once and the fp32 probabilities (saved for the backward) written once; more passes show up as a
    lower memory efficiency in its measured curve (op `cross_entropy`)."""
    logits = logit_tokens * vocab / tp
    return LOSS_FLOPS_PER_LOGIT * logits, logits * (act_bytes + 4)


def optimizer_bytes_per_param(dtype: str) -> int:
    return ADAM_BYTES_PER_PARAM[dtype] + CLIP_BYTES_PER_PARAM
