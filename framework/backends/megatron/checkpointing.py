"""megatron dist_checkpointing inside the core checkpoint contract (framework.core.checkpoint).

Every rank writes its shards of one checkpoint into the same folder, but only the main rank's
CheckpointStore writes (it adds the manifest and publishes with one rename). So the main rank's
write callback broadcasts its staging folder to all ranks, every rank then joins the collective
`dist_checkpointing.save` into it, and a barrier after the publish keeps ranks in step. The run dir
must be on a file system every rank sees (the usual torchrun / SLURM setup).

A checkpoint holds the model and optimizer shards (dist_checkpointing's torch_dist format: resumable
under another tp/pp, which reshards at load) and, in the manifest's JSON state, the step, the
scheduler state and the number of samples consumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from framework.core.checkpoint import Checkpoint, CheckpointStore


def _broadcast_path(path: Path | None) -> Path:
    import torch.distributed as dist

    box = [str(path) if path is not None else None]
    dist.broadcast_object_list(box, src=0)
    return Path(box[0])


def save(store: CheckpointStore, step: int, sharded_state: Callable[[], dict], state: dict, is_main: bool) -> Path:
    """Write checkpoint `step` from every rank; returns the published folder (on every rank)."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    def write(folder: Path) -> None:  # main rank, inside store.save
        _broadcast_path(folder)
        dist_checkpointing.save(sharded_state(), str(folder))
        dist.barrier()

    if is_main:
        final = store.save(step, write, state)
    else:
        folder = _broadcast_path(None)
        dist_checkpointing.save(sharded_state(), str(folder))
        dist.barrier()
        final = store.root / f"step_{step}"
    dist.barrier()  # the manifest is published before any rank goes on
    return final


def load(checkpoint: Checkpoint, sharded_state: dict) -> dict:
    """The state saved in `checkpoint`, loaded into the shapes of this run's `sharded_state` (any tp/pp)."""
    from megatron.core import dist_checkpointing

    return dist_checkpointing.load(sharded_state, str(checkpoint.path))
