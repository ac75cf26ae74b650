"""Checkpoints of the same state are the same bytes: no staging path or random save id in `.metadata`.

torch.distributed.checkpoint's writer stores StorageMeta(checkpoint_id=<the folder written>,
save_id=<a fresh uuid4>) in the checkpoint's `.metadata`. Both are bookkeeping (loading never reads
them; a missing StorageMeta is replaced at load), but they make two saves of identical state differ,
so the core manifest cannot show a resumed run ended bit-identical. megatron's writer
(FileSystemWriterAsync) leaves them out here. Checked against torch 2.13.
"""

from __future__ import annotations

from framework.core.patches import Phase, register_patch


def install() -> None:
    from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync

    FileSystemWriterAsync.storage_meta = lambda self: None


@register_patch("megatron.checkpoint_metadata", backend="megatron", phase=Phase.SETUP,
                requires={"megatron-core": ">=0.16,<0.17", "torch": ">=2.4"}, priority=20,
                description="deterministic dist-checkpoint .metadata (no staging path, no uuid; torch >= 2.4)")
def checkpoint_metadata(ctx) -> None:
    install()
