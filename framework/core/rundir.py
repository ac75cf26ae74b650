"""One run, one directory: unique run dir names and a lock held by the process that writes a run dir.

`${run_stamp:}` (conf/config.yaml's hydra.run.dir and hydra.sweep.dir) is the time to the second plus
this process's id, so two runs started in the same second get two dirs. The ranks of one
multi-process launch must share a dir, so inside a launcher that gives every rank the same id
(an `srun` step, torchrun) the stamp is that id instead: `slurm<job>.<step>` (a requeued job keeps
its id, so it resumes in the same dir) or `torchrun<run id>`.

`RunLock` is `run.lock` in the run dir, holding the host and pid of the main rank while the run
lives. A second process that would write into a live run dir is refused with one line; a lock left
by a process that died (kill -9, OOM killer) is taken over.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from framework.core.errors import ConfigError
from framework.core.paths import path_part, path_parts
from framework.core.stopping import disk_full

LOCK = "run.lock"


def launch_id(env: dict | None = None) -> str | None:
    """The id every rank of one multi-process launch shares, or None for a plain process."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID") and env.get("SLURM_STEP_ID") not in (None, "", "batch", "extern"):
        return f"slurm{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    run_id = env.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return f"torchrun{run_id}"
    return None


def run_stamp(kind: str = "run") -> str:
    """`HH-MM-SS_p<pid>` (unique per host and second), or the launch's id for a run's ranks.

    A sweep's dir is named by the one process that launches it: always time and pid."""
    shared = launch_id() if kind == "run" else None
    return path_part(shared) if shared else f"{time.strftime('%H-%M-%S')}_p{os.getpid()}"


# the override keys each name part of a sweep dir comes from (a recipe sets all three)
NAME_KEYS = (("backend", "backend.name"), ("task", "task.name"), ("model", "model.name"))


def sweep_parts(overrides, *names) -> str:
    """`${sweep_parts:${hydra.overrides.task},<backend, task and model names>}`: a sweep dir's name parts. The sweep's
    own config holds a swept group's default (`-m model=qwen3_8b,llama3_1_8b` named it after qwen3_30b_a3b, which
    no job runs), so a swept name is the sweep's values as typed (`,` as `+`), a swept recipe for all three."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    lines = OmegaConf.to_container(overrides, resolve=False) if OmegaConf.is_config(overrides) else overrides
    parts = list(names)
    for override in OverridesParser.create().parse_overrides([str(line) for line in lines or ()]):
        if not override.is_sweep_override():
            continue
        swept = override.input_line.split("=", 1)[1].replace(",", "+")  # a dir given back as hydra.sweep.dir=DIR:
        # a `,` there would be a sweep
        if override.key_or_group == "recipe":
            return path_parts(swept)
        parts = [swept if override.key_or_group in keys else part for keys, part in zip(NAME_KEYS, parts)]
    return path_parts(*parts)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """`run.lock` in `run_dir`: one live writer per run dir (only the main rank takes it)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self.held = False

    def acquire(self) -> None:
        """Take the lock; ConfigError naming the live holder; a dead holder's lock is taken over."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mine = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and self._live(holder):
                    raise ConfigError(
                        f"{self.path.parent}: run dir in use by pid {holder['pid']} on {holder['host']} (started "
                        f"{holder.get('started', '?')}); wait for it or use another hydra.run.dir") from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(json.dumps(mine) + "\n")
            except OSError as exc:  # a full disk: no half-written lock left behind
                self.path.unlink(missing_ok=True)
                raise disk_full(OSError(exc.errno, exc.strerror, str(self.path))) or exc from None
            self.held = True
            return
        raise ConfigError(f"{self.path}: could not take the run dir's lock (another process races for it)")

    def _holder(self) -> dict | None:
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # unreadable (cut off by a crash while being written): treated as stale
        return holder if isinstance(holder, dict) and isinstance(holder.get("pid"), int) else None

    @staticmethod
    def _live(holder: dict) -> bool:
        if holder.get("host") != socket.gethostname():
            return True  # another host's process cannot be checked from here: assume it lives
        return holder["pid"] != os.getpid() and _alive(holder["pid"])

    def release(self) -> None:
        if self.held:
            try:
                self.path.unlink(missing_ok=True)
            except OSError:  # a full or read-only disk: the next run sees a dead pid and takes over
                pass
            self.held = False
