"""Orbax checkpoints of a GRPO run, in `<run dir>/checkpoints/<step>/`.

Each checkpoint holds two items: `state` (params and optimizer state, sharded arrays) and `meta`
(JSON: the step, the data iterator position, the RNG key and a fingerprint of what must not change
across a resume: the model architecture, dtypes, the batch shape and the data set). Resuming checks
the fingerprint first, then restores the arrays straight onto their shardings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from framework.core.errors import CheckpointError

STATE, META = "state", "meta"
MESSAGE_CHARS = 200  # of a library error quoted in a one-line CheckpointError


def key_to_json(key: jax.Array) -> list[int]:
    return np.asarray(jax.random.key_data(key)).astype(np.uint32).tolist()


def key_from_json(data: list[int]) -> jax.Array:
    return jax.random.wrap_key_data(np.asarray(data, np.uint32))


def abstract_like(tree: Any) -> Any:
    """Shapes, dtypes and shardings of a tree of arrays: the restore target."""
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def first_difference(saved: dict, current: dict, prefix: str = "") -> str | None:
    """The first key (dotted) whose value differs between two nested dicts, or None."""
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = first_difference(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"{prefix}{key} (saved {a!r}, now {b!r})"
    return None


class Checkpoints:
    def __init__(self, directory: Path, keep: int, fingerprint: dict):
        self.directory = Path(directory).resolve()
        self.fingerprint = fingerprint
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
        self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=(STATE, META))

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: dict, meta: dict) -> Path:
        """Save asynchronously (training goes on while arrays are written); close() waits."""
        meta = {**meta, "step": step, "fingerprint": self.fingerprint}
        self.manager.save(step, args=ocp.args.Composite(**{STATE: ocp.args.StandardSave(state),
                                                           META: ocp.args.JsonSave(meta)}))
        return self.directory / str(step)

    def restore(self, step: int, target_state: dict) -> tuple[dict, dict]:
        """(state, meta) of `step`, arrays placed like `target_state`; CheckpointError when it does not fit."""
        where = self.directory / str(step)
        meta = self._restore_item(step, META, ocp.args.JsonRestore(), where)
        if not isinstance(meta, dict) or meta.get("step") != step or "fingerprint" not in meta:
            raise CheckpointError(f"{where}: meta item is not a GRPO checkpoint's (no step/fingerprint)")
        difference = first_difference(meta["fingerprint"], self.fingerprint)
        if difference:
            raise CheckpointError(f"{where}: saved by a different run setup: {difference}; resume with the same "
                                  f"model/data/batch settings or set grpo.checkpoint.resume=false")
        state = self._restore_item(step, STATE, ocp.args.StandardRestore(abstract_like(target_state)), where)
        return state, meta

    def _restore_item(self, step: int, item: str, args: Any, where: Path) -> Any:
        try:
            return self.manager.restore(step, args=ocp.args.Composite(**{item: args}))[item]
        except CheckpointError:
            raise
        except Exception as error:  # orbax/tensorstore raise many types for missing or damaged files
            message = " ".join(str(error).split())[:MESSAGE_CHARS]
            # from None: the CLI would append the whole (very long) tensorstore message to the line
            raise CheckpointError(f"{where}: cannot restore {item} ({type(error).__name__}: {message})") from None

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()
