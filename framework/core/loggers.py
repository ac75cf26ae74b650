"""Metric loggers: metrics.jsonl always, wandb when configured (offline by default)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    """Scalars from numpy/jax/torch become plain Python numbers; NaN/inf become strings JSON can hold."""
    if hasattr(value, "item") and callable(value.item):
        try:
            value = value.item()
        except (ValueError, RuntimeError):  # arrays with more than one element
            value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class MetricLogger:
    """One object per run. log() appends a JSON line {"step": n, "time_s": t, ...} and mirrors it to wandb."""

    def __init__(self, run_dir: Path, wandb_cfg: dict | None = None, run_name: str = "", config: dict | None = None,
                 enabled: bool = True):
        """enabled=False (ranks other than 0): log() does nothing."""
        self.path = Path(run_dir) / "metrics.jsonl"
        if enabled:
            drop_partial_last_line(self.path)  # a crash or a full disk cut the last row: rows append after it
        self._file = self.path.open("a", encoding="utf-8") if enabled else None
        self._start = time.time()
        self._wandb = None
        if enabled and wandb_cfg and wandb_cfg.get("enabled"):
            self._wandb = self._start_wandb(wandb_cfg, Path(run_dir), run_name, config or {})

    @staticmethod
    def _start_wandb(cfg: dict, run_dir: Path, run_name: str, config: dict):
        from framework.core.errors import BackendError, ConfigError

        try:
            import wandb
        except ImportError:
            raise BackendError("logger=wandb needs the wandb package: pip install -e '.[wandb]'") from None
        # The API key comes from the user's environment or netrc; we never write it anywhere.
        try:
            return wandb.init(
                project=cfg.get("project"), entity=cfg.get("entity"), mode=cfg.get("mode", "offline"),
                name=run_name or None, tags=list(cfg.get("tags") or []), dir=str(run_dir), config=config,
                group=cfg.get("group"), reinit="finish_previous",
            )
        except wandb.errors.UsageError as exc:  # a bad project name, online without an API key: the settings' fault
            offline = ("; logger.wandb.mode=offline needs no account (sync later with `wandb sync`)"
                       if cfg.get("mode") == "online" else "")
            raise ConfigError(f"logger.wandb: wandb refuses these settings (mode={cfg.get('mode')}, project="
                              f"{cfg.get('project')!r}): {str(exc).strip()}{offline}") from None

    def log(self, metrics: dict, step: int) -> None:
        if self._file is None:
            return
        row = {"step": int(step), "time_s": round(time.time() - self._start, 4)}
        row.update({k: _jsonable(v) for k, v in metrics.items()})
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as exc:  # a full disk: the error names the file
            raise OSError(exc.errno, exc.strerror, str(self.path)) from exc
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in row.items() if k != "step"}, step=int(step))

    def rewind(self, step: int) -> None:
        """Drop rows logged after `step`: a run resumed from the checkpoint of `step` logs them again."""
        if self._file is None:
            return
        self._file.close()
        kept = [row for row in read_metrics(self.path) if row.get("step", 0) <= step]
        with self.path.open("w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in kept)
        self._file = self.path.open("a", encoding="utf-8")

    def summary(self, metrics: dict) -> None:
        if self._wandb is not None:
            self._wandb.summary.update({k: _jsonable(v) for k, v in metrics.items()})

    def close(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.close()
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def read_metrics(path: Path) -> list[dict]:
    """Rows of a metrics.jsonl file (for tests, sweeps and plots). A last line cut off mid-write (a crash, a
    full disk) is skipped; a damaged line before it is a DataError naming the file and line."""
    from framework.core.errors import DataError

    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [(number, line) for number, line in enumerate(f, 1) if line.strip()]
    rows = []
    for index, (number, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except ValueError:
            if index == len(lines) - 1 and not line.endswith("\n"):
                break  # the cut-off last row: it is logged again after a resume
            raise DataError(f"{path}:{number}: not a JSON metrics row; remove the line to continue") from None
    return rows


def drop_partial_last_line(path: Path) -> None:
    """Truncate `path` after its last newline (the bytes after it are a row cut off mid-write)."""
    if not os.path.exists(path):
        return
    with open(path, "rb+") as f:
        data = f.read()
        if not data or data.endswith(b"\n"):
            return
        f.truncate(data.rfind(b"\n") + 1)
