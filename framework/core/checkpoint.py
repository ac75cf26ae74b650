"""The checkpoint contract every trainer uses: `<run dir>/checkpoints/step_<N>/`.

A backend writes its files (safetensors, an orbax tree, a megatron dist checkpoint) into a staging
folder through a callback; the store then adds `manifest.json` (the step, small JSON state such as
the data position and RNG, the run's fingerprint and the SHA-256 of every file) and publishes the
folder with one rename, so a crash never leaves a half-written checkpoint that looks complete.
`newest_intact()` verifies the checksums and falls back to the previous checkpoint, with a warning, when a
byte changed; the runtime's resume check (framework.core.resume) calls it before any record is written and
hands the checkpoint it found to the trainer's store, so the step recorded is the step resumed. Pickle is
never used: a checkpoint holds no code.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Container

from framework.core.errors import CheckpointError, ConfigError
from framework.core.ranges import Count, NonNegativeInt

log = logging.getLogger(__name__)
CHECKPOINT_DIR, MANIFEST, PREFIX = "checkpoints", "manifest.json", "step_"
_CHUNK = 1 << 20


@dataclass
class CheckpointPolicy:
    """When to save, how many to keep, whether to continue from the run dir's latest checkpoint."""

    every: NonNegativeInt  # save every this many steps and after the last one; 0 = never
    keep: Count  # the most recent checkpoints kept on disk
    resume: bool  # continue from the latest valid checkpoint in the run dir (SLURM requeue, kill -9)

    def check(self, key: str) -> None:
        if self.every < 0:
            raise ConfigError(f"{key}.every: {self.every} must be >= 0 (0 = never)")
        if self.keep < 1:
            raise ConfigError(f"{key}.keep: {self.keep} must be >= 1")

    def due(self, step: int, last_step: int) -> bool:
        """Save after `step` (1-based)? Every `every` steps and after the last one, unless every=0."""
        return self.every > 0 and (step % self.every == 0 or step == last_step)


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    state: dict  # the JSON state given to save() (data position, RNG, ...)

    def file(self, name: str) -> Path:
        return self.path / name


def _is_manifest(manifest: Any, step: int) -> bool:
    """The fields this store reads, of the types it writes: a manifest of another shape was a traceback on resume."""
    if not isinstance(manifest, dict) or manifest.get("step") != step or not isinstance(manifest.get("files"), dict):
        return False
    entries = manifest["files"].values()
    return (all(isinstance(e, dict) and isinstance(e.get("bytes"), int) and isinstance(e.get("sha256"), str)
                for e in entries)
            and isinstance(manifest.get("state", {}), dict) and isinstance(manifest.get("fingerprint", {}), dict))


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """Checkpoints of one run. `enabled=False` (ranks other than the main one) writes nothing."""

    def __init__(self, run_dir: Path, policy: CheckpointPolicy, fingerprint: dict | None = None,
                 enabled: bool = True, absent_ok: Container[str] = frozenset(), verified: Checkpoint | None = None):
        self.root = Path(run_dir) / CHECKPOINT_DIR
        self.policy = policy
        self.fingerprint = fingerprint or {}
        self.enabled = enabled
        self.absent_ok = absent_ok  # keys the runtime's resume check accepted on one side only (resume.py)
        self.verified = verified  # the checkpoint that check verified: its files are not hashed twice

    # ---- writing ---------------------------------------------------------------------------------

    def save(self, step: int, write: Callable[[Path], None], state: dict | None = None) -> Path:
        """Call `write(folder)` to fill a staging folder, then add the manifest and publish it as step_<step>."""
        final = self.root / f"{PREFIX}{step}"
        if not self.enabled:
            return final
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".staging_{PREFIX}{step}_{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        try:
            write(staging)
            files = {str(p.relative_to(staging)): {"sha256": sha256_file(p), "bytes": p.stat().st_size}
                     for p in sorted(staging.rglob("*")) if p.is_file()}
            manifest = {"step": step, "state": state or {}, "fingerprint": self.fingerprint,
                        "files": files, "created": time.time()}
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=str))
            for path in [*staging.rglob("*"), staging]:
                if path.is_file():
                    with path.open("rb") as handle:
                        os.fsync(handle.fileno())
            self._publish(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._prune()
        return final

    def _publish(self, staging: Path, final: Path) -> None:
        if final.exists():  # the same step saved again (a resumed segment): swap, never leave neither
            old = final.with_name(f".old_{final.name}_{os.getpid()}")
            os.replace(final, old)
            os.replace(staging, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, final)
        _fsync_dir(self.root)

    def _prune(self) -> None:
        for step in self.steps()[:-self.policy.keep]:
            shutil.rmtree(self.root / f"{PREFIX}{step}", ignore_errors=True)

    # ---- reading ---------------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Published checkpoint steps, oldest first (staging folders are ignored)."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            suffix = path.name[len(PREFIX):]
            if path.is_dir() and path.name.startswith(PREFIX) and suffix.isdigit():
                found.append(int(suffix))
        return sorted(found)

    def verify(self, step: int) -> Checkpoint:
        """The checkpoint of `step` after checking its manifest and every file's checksum."""
        path = self.root / f"{PREFIX}{step}"
        manifest_path = path / MANIFEST
        try:
            manifest = json.loads(manifest_path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{manifest_path}: unreadable manifest ({type(exc).__name__})") from None
        if not _is_manifest(manifest, step):  # also one cut off, or written by another version of the store
            raise CheckpointError(f"{manifest_path}: not a checkpoint manifest of step {step}")
        for name, entry in manifest["files"].items():
            file = path / name
            if not file.is_file():
                raise CheckpointError(f"{file}: missing (listed in {MANIFEST})")
            if file.stat().st_size != entry["bytes"] or sha256_file(file) != entry["sha256"]:
                raise CheckpointError(f"{file}: checksum mismatch, the file changed after it was written")
        return Checkpoint(step, path, manifest.get("state", {}))

    def check_fingerprint(self, checkpoint: Checkpoint) -> None:
        """CheckpointError naming the first setting that differs from the run that saved `checkpoint`."""
        saved = json.loads((checkpoint.path / MANIFEST).read_text()).get("fingerprint", {})
        difference = first_difference(saved, self.fingerprint, absent_ok=self.absent_ok)
        if difference:
            raise CheckpointError(f"{checkpoint.path}: saved by a different setup: {difference}; use the same "
                                  f"settings, or a new run dir")

    def newest_intact(self) -> Checkpoint | None:
        """The newest checkpoint whose files verify; a damaged one is skipped with a warning. None: no checkpoint.
        Every one damaged is a CheckpointError: starting over in this run dir would append a second step 1.. to its
        metrics and prune the damaged checkpoints."""
        steps = self.steps()
        for step in reversed(steps):
            try:
                return self.verify(step)
            except CheckpointError as exc:
                log.warning("skipping damaged checkpoint: %s", exc)
        if steps:
            raise CheckpointError(f"{self.root}: every checkpoint is damaged (steps {', '.join(map(str, steps))}; "
                                  f"see the warnings); start in a new run dir (hydra.run.dir=...), or move "
                                  f"{self.root} away to start over here")
        return None

    def latest(self) -> Checkpoint | None:
        """newest_intact(), refused when the run that saved it had a different setup."""
        checkpoint = self.newest_intact()
        if checkpoint is not None:
            self.check_fingerprint(checkpoint)
        return checkpoint

    def resume_point(self) -> Checkpoint | None:
        """The checkpoint the runtime's resume check verified before writing any record (segments.jsonl names its
        step), else latest(); None when the policy does not resume."""
        if not self.policy.resume:
            return None
        if self.verified is None:
            return self.latest()
        self.check_fingerprint(self.verified)
        return self.verified


def first_difference(saved: Any, current: Any, prefix: str = "", absent_ok: Container[str] = frozenset()) -> str | None:
    """The first dotted key whose value differs between two nested dicts, or None. A key in `absent_ok` that
    only one side holds is no difference (a key a release added or removed, accepted by the resume check)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current), key=str):
            dotted = f"{prefix}{key}"
            if key not in saved or key not in current:
                if dotted in absent_ok:
                    continue
                return (f"{dotted} (not in the checkpoint, now {current[key]!r})" if key not in saved
                        else f"{dotted} (saved {saved[key]!r}, not in this config)")
            found = first_difference(saved[key], current[key], f"{dotted}.", absent_ok)
            if found:
                return found
        return None
    return None if saved == current else f"{prefix.rstrip('.')} (saved {saved!r}, now {current!r})"
