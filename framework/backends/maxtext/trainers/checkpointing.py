"""GRPO checkpoints on the core CheckpointStore (framework/core/checkpoint.py).

Each checkpoint is `<run dir>/checkpoints/step_<N>/` with `state.safetensors` (params and optimizer
state, one tensor per tree path) and the store's manifest (SHA-256 of the file; the data iterator
position, the RNG key and the raw-bit dtypes in its JSON state). safetensors rather than orbax: its
bytes depend only on the arrays, so a resumed run's final checkpoint can be compared file for file
with an uninterrupted one (orbax's OCDBT names files randomly and stamps times), and it holds no code.
Arrays are gathered to the host by every process; the main rank writes; restore places each array
straight onto the sharding of the freshly initialised state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from framework.core.checkpoint import Checkpoint
from framework.core.errors import CheckpointError

STATE_FILE = "state.safetensors"
# numpy dtypes safetensors stores as they are; others (bfloat16, float8 from ml_dtypes) go as raw bits
NATIVE = {"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8",
          "bool"}


def key_to_json(key: jax.Array) -> list[int]:
    return np.asarray(jax.random.key_data(key)).astype(np.uint32).tolist()


def key_from_json(data: list[int]) -> jax.Array:
    return jax.random.wrap_key_data(np.asarray(data, np.uint32))


def tree_names(tree: Any) -> list[tuple[str, Any]]:
    """(path name, leaf) of every array in a tree, e.g. ('params/layers_0/attention/q/kernel', x)."""
    return [(jax.tree_util.keystr(path, simple=True, separator="/"), leaf)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def host_arrays(tree: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tree as named host arrays ready for safetensors, and {name: dtype} of those kept as raw bits.

    Every process calls it (multi-host arrays are gathered); only the main rank writes the result."""
    from framework.backends.maxtext.trainers.rollout import to_host

    arrays, raw_dtypes = {}, {}
    for name, value in tree_names(to_host(tree)):
        array = np.asarray(value, order="C")  # (ascontiguousarray would make a scalar 1-d)
        if array.dtype.name not in NATIVE:
            raw_dtypes[name] = array.dtype.name
            array = array.view(f"uint{array.dtype.itemsize * 8}")
        arrays[name] = array
    return arrays, raw_dtypes


def write_arrays(folder: Path, arrays: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    save_file(arrays, str(folder / STATE_FILE))


def read_state(checkpoint: Checkpoint, target: Any) -> Any:
    """The saved tree, each array placed like its counterpart in `target`; CheckpointError when it does not fit."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = checkpoint.file(STATE_FILE)
    try:
        arrays = load_file(str(path))
    except (OSError, SafetensorError) as error:
        raise CheckpointError(f"{path}: unreadable ({type(error).__name__}: {error})") from None
    raw_dtypes = checkpoint.state.get("dtypes", {})
    leaves, treedef = jax.tree_util.tree_flatten(target)
    placed = []
    for (name, like), _ in zip(tree_names(target), leaves):
        if name not in arrays:
            raise CheckpointError(f"{path}: no array {name} (saved by another model or optimizer)")
        array = arrays[name]
        if name in raw_dtypes:
            array = array.view(jax.numpy.dtype(raw_dtypes[name]))
        if array.shape != like.shape or array.dtype != like.dtype:
            raise CheckpointError(f"{path}: {name} is {array.dtype}{list(array.shape)}, this run needs "
                                  f"{like.dtype}{list(like.shape)}")
        placed.append(jax.make_array_from_callback(array.shape, like.sharding, lambda index, a=array: a[index]))
    return jax.tree_util.tree_unflatten(treedef, placed)
