"""The run directory contract, the same for every task.

    config.yaml     the resolved config
    overrides.yaml  the command-line overrides of this job (this segment)
    segments.jsonl  one line per start in this run dir: its overrides, the step it resumed from, keys
                    a release added or removed since the checkpoint
    env.json        host, accelerators, package versions, git commit
    patches.json    the patch report (applied / skipped with reason / failed)
    metrics.jsonl   one JSON object per logged step (framework.core.loggers)
    summary.json    status, final metrics and the TrainingResult
    traceback.txt   only when the run raised

Files are written whole (temp file + rename): a crash never leaves half a record.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

SUMMARY, SEGMENTS = "summary.json", "segments.jsonl"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:  # a full disk: no temp file left behind, and the error names the record
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


class RunRecords:
    """Writes the records; on ranks other than 0 (enabled=False) every write is skipped."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        self.run_dir = Path(run_dir)
        self.enabled = enabled
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def _text(self, name: str, text: str) -> None:
        if self.enabled:
            write_atomic(self.run_dir / name, text)

    def _json(self, name: str, data: Any) -> None:
        if self.enabled:
            write_json(self.run_dir / name, data)

    def write_config(self, cfg: DictConfig) -> None:
        """The resolved config; the unresolved one when an interpolation is broken (the error says which)."""
        from omegaconf.errors import OmegaConfBaseException

        try:
            text = OmegaConf.to_yaml(cfg, resolve=True)
        except OmegaConfBaseException:
            text = OmegaConf.to_yaml(cfg, resolve=False)
        self._text("config.yaml", text)

    def write_overrides(self, overrides: list[str]) -> None:
        self._text("overrides.yaml", OmegaConf.to_yaml(OmegaConf.create(list(overrides))))

    def append_segment(self, overrides: list[str], resumed_from_step: int | None, new_keys: dict | None = None,
                       removed_keys: dict | None = None) -> None:
        """A run dir resumed N times holds N + 1 segments; each says what its command line changed, the step it
        resumed from, and the keys a release added (their value now) or removed (the saved value) since then."""
        if not self.enabled:
            return
        path = self.run_dir / SEGMENTS
        number = len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0
        line = {"segment": number, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "overrides": list(overrides),
                "resumed_from_step": resumed_from_step, "new_keys": new_keys or {}, "removed_keys": removed_keys or {}}
        try:
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc

    def write_env(self, env: dict) -> None:
        self._json("env.json", env)

    def write_patches(self, report: dict) -> None:
        self._json("patches.json", report)

    def write_summary(self, summary: dict) -> None:
        self._json(SUMMARY, summary)

    def write_traceback(self, text: str) -> None:
        self._text("traceback.txt", text)

    def clear_traceback(self) -> None:
        if self.enabled:
            (self.run_dir / "traceback.txt").unlink(missing_ok=True)


def read_summary(run_dir: Path) -> dict | None:
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))
