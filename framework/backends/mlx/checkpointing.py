"""The mlx trainers' checkpoint files, written through the core CheckpointStore (manifest, atomic publish).

    adapters.safetensors   the LoRA weights (mlx-lm layout; adapter_config.json next to it)
    optimizer.safetensors  AdamW's state: step, learning rate, first and second moments
The JSON state of the manifest holds the step and the data position; the RNG needs no file: each
optimizer step reseeds MLX from (seed, step) (see trainers/base.py), so a resumed run draws the same
dropout masks as an uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten

from framework.core.errors import CheckpointError

ADAPTERS, OPTIMIZER, ADAPTER_CONFIG = "adapters.safetensors", "optimizer.safetensors", "adapter_config.json"


def flat(tree) -> dict:
    """Dotted names -> arrays, sorted: a restored tree flattens in another order, and the file bytes
    (checksummed by the manifest) must not depend on it."""
    return dict(sorted(tree_flatten(tree)))


def write_adapter(model, adapter_config: dict, folder: Path) -> None:
    """The adapter alone, in mlx-lm's format (`mlx_lm.load(base, adapter_path=folder)` reads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / ADAPTERS), flat(model.trainable_parameters()))
    (folder / ADAPTER_CONFIG).write_text(json.dumps(adapter_config, indent=1, sort_keys=True))


def write_training_state(model, optimizer, adapter_config: dict, folder: Path) -> None:
    write_adapter(model, adapter_config, folder)
    mx.save_safetensors(str(folder / OPTIMIZER), flat(optimizer.state))


def restore_training_state(model, optimizer, folder: Path) -> None:
    """Load the adapters into `model` and the moments into `optimizer`; CheckpointError if they do not fit."""
    adapters = mx.load(str(folder / ADAPTERS))
    expected = dict(tree_flatten(model.trainable_parameters()))
    if set(adapters) != set(expected) or any(adapters[k].shape != v.shape for k, v in expected.items()):
        raise CheckpointError(f"{folder / ADAPTERS}: its LoRA weights do not fit this model and LoRA config; "
                              f"use the same settings, or a new run dir")
    model.load_weights(list(adapters.items()), strict=False)
    optimizer.state = tree_unflatten(list(mx.load(str(folder / OPTIMIZER)).items()))
    mx.eval(model.parameters(), optimizer.state)
