"""Resume rules: which settings a run may change when it continues from its checkpoints.

The run's fingerprint is the resolved config minus the keys that may change on resume: the global
ones below, each task's `task.resume_may_change` (conf/task/<task>.yaml, e.g. `grpo.steps`,
`grpo.eval.every`) and each backend's `backend.resume_may_change` (conf/backend/<backend>.yaml). Every checkpoint manifest stores it; before any record of a run dir is touched the
runtime compares it with the latest checkpoint's, and refuses a changed setup naming the first
differing key. A run dir that holds checkpoints is never overwritten: resume off is refused too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from framework.core.checkpoint import CHECKPOINT_DIR, MANIFEST, PREFIX, CheckpointPolicy, first_difference
from framework.core.errors import CheckpointError

# Settings that never change what is computed: where metrics go, what is shown, which patches run.
GLOBAL_MAY_CHANGE = ("logger", "progress", "debug", "patches", "task.resume_may_change",
                     "backend.resume_may_change")


def may_change(cfg: DictConfig) -> list[str]:
    """Global keys, then the task's and the backend's (`backend.resume_may_change`, e.g. a cache folder)."""
    backend = cfg.get("backend") or {}
    return [*GLOBAL_MAY_CHANGE, *(cfg.task.get("resume_may_change") or []),
            *(backend.get("resume_may_change") or [])]


def run_fingerprint(cfg: DictConfig) -> dict:
    """The resolved config without the keys that may change on resume."""
    from framework.core.validation import resolve_all

    resolve_all(cfg)
    container = OmegaConf.to_container(cfg, resolve=True)
    container.pop("hydra", None)
    for dotted in may_change(cfg):
        _drop(container, dotted.split("."))
    return json.loads(json.dumps(container, default=str))  # the form a manifest holds


def _drop(node: Any, keys: list[str]) -> None:
    if not isinstance(node, dict) or keys[0] not in node:
        return
    if len(keys) == 1:
        del node[keys[0]]
    else:
        _drop(node[keys[0]], keys[1:])


def task_policy(cfg: DictConfig) -> tuple[str, CheckpointPolicy | None]:
    """The task's checkpoint policy (`<task>.checkpoint`) and its key; None for a task that does not checkpoint."""
    from framework.core.build import build

    key = f"{cfg.task.name}.checkpoint"
    node = OmegaConf.select(cfg, key)
    return key, (build(CheckpointPolicy, node, key) if node is not None else None)


def published_steps(run_dir: Path) -> list[int]:
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    return sorted(int(p.name[len(PREFIX):]) for p in root.iterdir()
                  if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit())


def _latest_manifest(run_dir: Path, steps: list[int]) -> tuple[Path, dict] | None:
    for step in reversed(steps):
        path = Path(run_dir) / CHECKPOINT_DIR / f"{PREFIX}{step}"
        try:
            return path, json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError):
            continue  # a damaged manifest: the store falls back past it too
    return None


def check_resumable(run_dir: Path, cfg: DictConfig) -> int | None:
    """The step a run in `run_dir` resumes from (None: a fresh start); CheckpointError when the run dir's
    checkpoints must not be resumed with this config or overwritten. Reads only: nothing is written."""
    steps = published_steps(run_dir)
    if not steps:
        return None
    key, policy = task_policy(cfg)
    root = Path(run_dir) / CHECKPOINT_DIR
    if policy is None:
        raise CheckpointError(f"{root}: holds checkpoints, and task={cfg.task.name} does not resume; start in a new "
                              f"run dir (hydra.run.dir=...)")
    if not policy.resume:
        raise CheckpointError(f"{root}: holds checkpoints (latest: step {steps[-1]}) and {key}.resume=false; resume "
                              f"them with {key}.resume=true, or start in a new run dir (hydra.run.dir=...)")
    found = _latest_manifest(run_dir, steps)
    if found is None:
        return None  # every manifest is unreadable: the trainer's store reports and starts over
    path, manifest = found
    difference = first_difference(manifest.get("fingerprint", {}), run_fingerprint(cfg))
    if difference:
        allowed = ", ".join(may_change(cfg)[len(GLOBAL_MAY_CHANGE):]) or "none"
        raise CheckpointError(f"{path}: saved by a different setup: {difference}; on resume only these may change: "
                              f"{allowed}; use the checkpoint's value or a new run dir (hydra.run.dir=...)")
    steps_key = f"{cfg.task.name}.steps"
    total = OmegaConf.select(cfg, steps_key)
    if isinstance(total, int) and total < manifest["step"]:
        raise CheckpointError(f"{steps_key}: {total} is below the checkpoint's step {manifest['step']} in {path}; "
                              f"set {steps_key} >= {manifest['step']} or use a new run dir")
    return int(manifest["step"])
