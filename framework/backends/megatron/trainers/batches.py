"""Which samples each rank trains on, and the loss of a micro-batch.

Sample indices are a pure function of (step, data-parallel rank, micro-batch), so every tp/pp
rank of a data-parallel replica reads the same sequences, a different layout of the same global
batch sees the same samples, and a resumed run continues exactly where the checkpoint left off.
"""

from __future__ import annotations


def sample_indices(step: int, micro: int, dp_rank: int, global_batch: int, micro_batch: int, dp: int) -> range:
    """Samples of micro-batch `micro` of optimizer step `step` (1-based) on data-parallel rank `dp_rank`."""
    start = (step - 1) * global_batch + dp_rank * (global_batch // dp) + micro * micro_batch
    return range(start, start + micro_batch)


def collate(dataset, indices, device):
    """A micro-batch dict (tokens, labels, loss_mask, position_ids) of `indices` on `device`."""
    import torch

    items = [dataset[i] for i in indices]
    keys = ("tokens", "labels", "loss_mask", "position_ids")
    return {k: torch.stack([torch.as_tensor(item[k]) for item in items]).to(device, non_blocking=True) for k in keys}


def masked_mean_loss(loss_mask, output_tensor):
    """Mean token loss of a micro-batch (megatron's schedules average it over micro-batches)."""
    import torch

    losses = output_tensor.float().view(-1)
    mask = loss_mask.reshape(-1).float()
    loss = torch.sum(losses * mask) / mask.sum().clamp(min=1.0)
    return loss, {"lm loss": loss.detach().clone()}  # the schedule divides `loss` in place
