"""Resume rules: which settings a run may change when it continues from its checkpoints.

The run's fingerprint is the resolved config minus the keys that may change on resume: the global
ones below, each task's `task.resume_may_change` (conf/task/<task>.yaml, e.g. `grpo.steps`,
`grpo.eval.every`) and each backend's `backend.resume_may_change` (conf/backend/<backend>.yaml). Every checkpoint manifest stores it; before any record of a run dir is touched the
runtime compares it with the latest checkpoint's, and refuses a changed setup naming the first
differing key. A run dir that holds checkpoints is never overwritten: resume off is refused too.

A release may add or remove config keys. A key the checkpoint's fingerprint lacks is accepted when no
command-line override sets it (its value is then the config files' one), a key the config no longer has
when no override removes it (`~key`); each is one warning and a field of the segment in segments.jsonl.
Which keys a user set comes from the command line Hydra recorded (`hydra.overrides.task`, the list in
overrides.yaml): recomposing the config without them would need the same search path, and a group's
option (`backend=maxtext`) is files, not a value the user typed; a different option changes its `name`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Container, Sequence

from omegaconf import DictConfig, OmegaConf

from framework.core.checkpoint import (CHECKPOINT_DIR, MANIFEST, PREFIX, Checkpoint, CheckpointPolicy, CheckpointStore,
                                       first_difference)
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


@dataclass(frozen=True)
class OneSidedAllowed:
    """The keys a checkpoint comparison accepts on one side only: any that no command-line override sets (a
    release added or removed it) and the keys that may change. A container (`key in allowed`), so the trainer's
    store asks it again of the checkpoint it resumes."""

    overrides: tuple[str, ...] = ()
    may_change: frozenset[str] = frozenset()

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self.may_change or set_by(key, self.overrides) is None)


@dataclass(frozen=True)
class ResumePoint:
    """Where a run resumes, and the keys accepted although only one side holds them."""

    step: int
    new_keys: dict[str, Any] = field(default_factory=dict)  # not in the checkpoint: the config files' value now
    removed_keys: dict[str, Any] = field(default_factory=dict)  # in the checkpoint, gone now: the saved value
    absent_ok: Container[str] = frozenset()  # for the trainer's store: OneSidedAllowed
    checkpoint: Checkpoint | None = None  # verified: the trainer's store resumes it without hashing it again

    def warnings(self) -> list[str]:
        return ([f"resume: {key} is not in the checkpoint's settings; resuming with the config files' {value!r}"
                 for key, value in self.new_keys.items()] +
                [f"resume: {key} (saved {value!r}) is no longer in the config; resuming without it"
                 for key, value in self.removed_keys.items()])


def one_sided_keys(saved: Any, current: Any, prefix: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """({key: current value} of keys only `current` holds, {key: saved value} of keys only `saved` holds); the
    topmost such dotted keys."""
    new, removed = {}, {}
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            dotted = f"{prefix}{key}"
            if key not in saved:
                new[dotted] = current[key]
            elif key not in current:
                removed[dotted] = saved[key]
            else:
                deeper_new, deeper_removed = one_sided_keys(saved[key], current[key], f"{dotted}.")
                new.update(deeper_new)
                removed.update(deeper_removed)
    return new, removed


def set_by(key: str, overrides: Sequence[str]) -> str | None:
    """The command-line override that sets or removes `key` (the key, one inside it, a dict or `~` above it, a
    group placed at a package holding it: `group@pkg=option`, with '+' or without); None: the config files give it.
    A group's option at its own place (`backend=maxtext`, `+group=option`) is files."""
    for override in overrides:
        target, _, value = override.partition("=")
        group, at, package = target.lstrip("+~").partition("@")
        if at:  # the option's keys land under the package (the root: anywhere), whether '+' added the group or not
            name, whole = hydra_package(package), True
        else:
            name, whole = group.replace("/", "."), target.startswith("~") or value.lstrip().startswith("{")
        above = whole and (not name or key.startswith(f"{name}."))
        if name == key or (name and name.startswith(f"{key}.")) or above:
            return override
    return None


def hydra_package(package: str) -> str:
    """The dotted node an override's `@package` places a group at, as Hydra resolves it: `_global_`, `_here_` (the
    primary config's package, for a command-line override) and the empty package are the root (""), `_global_.a.b`
    is `a.b`."""
    if package == "_here_":
        return ""
    start = package.rfind("_global_")
    return package if start == -1 else package[start + len("_global_") + 1:]


def _refusal(path: Path, cfg: DictConfig, difference: str, set_on_command_line: dict[str, str]) -> CheckpointError:
    key = difference.split(" (")[0]
    allowed = may_change(cfg)[len(GLOBAL_MAY_CHANGE):]
    way_out = "use the checkpoint's value or a new run dir (hydra.run.dir=...)"
    if key in set_on_command_line:  # a key a release added or removed, which this command line sets
        owner = "backend" if key.startswith("backend.") else "task"
        node = cfg.get(owner) or {}
        listed = ",".join([*(node.get("resume_may_change") or []), key])
        plus = "" if "resume_may_change" in node else "+"  # a backend without the list (Hydra refuses a new key)
        way_out = (f"{key} is set by the override {set_on_command_line[key]!r}: drop it to resume with the config "
                   f"files' value, allow it with '{plus}{owner}.resume_may_change=[{listed}]', or use a new run dir "
                   f"(hydra.run.dir=...)")
    return CheckpointError(f"{path}: saved by a different setup: {difference}; on resume only these may change: "
                           f"{', '.join(allowed) or 'none'}; {way_out}")


RUN_KIND = ("backend", "task", "model")  # what a run dir's records are of


def check_same_kind(run_dir: Path, cfg: DictConfig) -> None:
    """CheckpointError when `run_dir` holds the records (config.yaml) of a run of another backend, task or model:
    this run's metrics rows, segments and summary would mix with them (with no checkpoint nothing else compares)."""
    import yaml

    if (Path(run_dir) / "multirun.yaml").is_file():  # a sweep's root: its tables and this run's records would mix
        raise CheckpointError(f"hydra.run.dir: {run_dir} is a sweep dir (multirun.yaml): this run's records would mix "
                              f"with the sweep's tables; start in a new run dir, or give one of its jobs' dirs "
                              f"({run_dir}/0, ...) to resume that job")
    try:
        saved = yaml.safe_load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # none (a fresh dir) or unreadable: nothing to compare
        return
    if not isinstance(saved, dict):
        return
    before = {group: (saved.get(group) or {}).get("name") if isinstance(saved.get(group), dict) else None
              for group in RUN_KIND}
    now = {group: cfg[group].name for group in RUN_KIND}
    if None not in before.values() and before != now:
        def kind(names):
            return " ".join(f"{group}={name}" for group, name in names.items())

        raise CheckpointError(f"hydra.run.dir: {run_dir} holds the records of a {kind(before)} run and this one is "
                              f"{kind(now)}: they would mix; start in a new run dir (leave hydra.run.dir out or give "
                              f"another)")


def check_resumable(run_dir: Path, cfg: DictConfig, overrides: Sequence[str] = ()) -> ResumePoint | None:
    """Where a run in `run_dir` resumes (None: a fresh start); CheckpointError when the run dir's checkpoints
    must not be resumed with this config and command line (`overrides`) or overwritten. Reads only."""
    if (Path(run_dir) / CHECKPOINT_DIR).exists() and not (Path(run_dir) / CHECKPOINT_DIR).is_dir():
        raise CheckpointError(f"{Path(run_dir) / CHECKPOINT_DIR}: not a folder (the run's checkpoints go there); "
                              f"move it away, or start in a new run dir (hydra.run.dir=...)")
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
    # the one the trainer resumes: every one damaged is refused here, before a record is written
    checkpoint = CheckpointStore(run_dir, policy, enabled=False).newest_intact()
    path, manifest = checkpoint.path, json.loads((checkpoint.path / MANIFEST).read_text())
    saved, current = manifest.get("fingerprint", {}), run_fingerprint(cfg)
    for dotted in may_change(cfg):  # a key allowed to change now is not compared, even one the checkpoint holds
        _drop(saved, dotted.split("."))
    new, removed = one_sided_keys(saved, current)
    explicit = {k: o for k in [*new, *removed] if (o := set_by(k, overrides)) is not None}
    new, removed = ({k: v for k, v in keys.items() if k not in explicit} for keys in (new, removed))
    difference = first_difference(saved, current, absent_ok=frozenset([*new, *removed]))
    if difference:
        raise _refusal(path, cfg, difference, explicit)
    steps_key = f"{cfg.task.name}.steps"
    total = OmegaConf.select(cfg, steps_key)
    if isinstance(total, int) and total < manifest["step"]:
        raise CheckpointError(f"{steps_key}: {total} is below the checkpoint's step {manifest['step']} in {path}; "
                              f"set {steps_key} >= {manifest['step']} or use a new run dir")
    return ResumePoint(checkpoint.step, new, removed, OneSidedAllowed(tuple(overrides), frozenset(may_change(cfg))),
                       checkpoint)
