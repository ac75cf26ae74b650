"""The resume conformance test every trainer runs: kill -9 mid-run -> resume -> bit-identical final state.

    from tests.conformance import check_kill_resume
    def test_resume_conformance(tmp_path):
        check_kill_resume(tmp_path, ["recipe=sft_torch_cpu", "sft.steps=6", "sft.checkpoint.every=2"],
                          kill_after_checkpoint=2)

One run goes straight through; a second, in another run dir, is killed with SIGKILL as soon as the
checkpoint of step `kill_after_checkpoint` is published (a step after it may be under way), then
started again with the same command: it must resume from the checkpoint and end with the same final
checkpoint, file for file (the SHA-256s of the core manifest), and the same metrics rows for the
deterministic keys.

Two more checks every trainer runs (issue 11, docs/reliability.md):
- check_non_finite_stops: a run whose loss turns NaN/inf fails (exit 1, one line naming the step and the
  value), keeps only checkpoints of earlier steps and logs no row of the bad step;
- check_signal_stops_and_resumes: SIGTERM/SIGINT mid-run -> a checkpoint at the step it stopped after,
  summary `interrupted`, exit 143/130 with one line; the rerun resumes from that checkpoint;
- check_one_rank_signal_stops_every_rank: under torchrun with 2 ranks, SIGTERM to rank 1 alone stops both
  ranks at the same step boundary with one checkpoint of that step (the ranks agree on a stop request).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from framework.core.checkpoint import CHECKPOINT_DIR, MANIFEST, PREFIX
from framework.core.loggers import read_metrics
from tests.conftest import REPO_ROOT

NONDETERMINISTIC = ("time_s", "_per_s", "wall", "mfu", "compile")


def _command(overrides: list[str], run_dir: Path) -> list[str]:
    return [sys.executable, str(REPO_ROOT / "run.py"), *overrides, f"hydra.run.dir={run_dir}", "progress=false"]


def _final_manifest(run_dir: Path) -> tuple[int, dict]:
    root = run_dir / CHECKPOINT_DIR
    steps = sorted(int(p.name[len(PREFIX):]) for p in root.iterdir() if p.name.startswith(PREFIX))
    manifest = json.loads((root / f"{PREFIX}{steps[-1]}" / MANIFEST).read_text())
    return steps[-1], {name: entry["sha256"] for name, entry in manifest["files"].items()}


def _deterministic(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(tag in k for tag in NONDETERMINISTIC)}


def check_kill_resume(tmp_path: Path, overrides: list[str], kill_after_checkpoint: int,
                      timeout_s: float = 900, env: dict | None = None) -> None:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    done = subprocess.run(_command(overrides, straight), env=full_env, capture_output=True, text=True,
                          timeout=timeout_s)
    assert done.returncode == 0, done.stderr[-3000:]

    marker = killed / CHECKPOINT_DIR / f"{PREFIX}{kill_after_checkpoint}" / MANIFEST
    proc = subprocess.Popen(_command(overrides, killed), env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    while not marker.exists():
        assert proc.poll() is None, f"run ended before checkpoint {kill_after_checkpoint}: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "timed out waiting for the checkpoint"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    resumed = subprocess.run(_command(overrides, killed), env=full_env, capture_output=True, text=True,
                             timeout=timeout_s)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["metrics"].get("resumed_from_step", 0) >= kill_after_checkpoint, summary["metrics"]

    assert _final_manifest(killed) == _final_manifest(straight)
    rows = [[_deterministic(r) for r in read_metrics(d / "metrics.jsonl")] for d in (straight, killed)]
    assert [r.get("step") for r in rows[0]] == [r.get("step") for r in rows[1]]
    assert rows[0] == rows[1]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def checkpoint_steps(run_dir: Path) -> list[int]:
    root = run_dir / CHECKPOINT_DIR
    return sorted(int(p.name[len(PREFIX):]) for p in root.iterdir() if p.name.startswith(PREFIX)) if root.is_dir() else []


def check_non_finite_stops(run_dir: Path, overrides: list[str], keep: int = 2, env: dict | None = None,
                           timeout_s: float = 900) -> int:
    """Run `overrides` (which make the loss non-finite; checkpoint every step) and check how it stopped; the bad step."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run(_command(overrides, run_dir), env=full_env, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = _error_lines(proc.stderr)
    assert len(errors) == 1 and "(non-finite); stopped before saving it" in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    bad_step = int(errors[0].split("step ")[1].split(":")[0])
    assert bad_step >= 2 and ("=nan" in errors[0] or "=inf" in errors[0]), errors[0]
    assert checkpoint_steps(run_dir) == list(range(1, bad_step))[-keep:]  # every good step; none of the bad one
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "failed"
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == list(range(1, bad_step))
    return bad_step


def check_signal_stops_and_resumes(run_dir: Path, overrides: list[str], steps_key: str, signal_name: str = "SIGTERM",
                                   env: dict | None = None, timeout_s: float = 900) -> int:
    """`overrides` run many steps and checkpoint (rarely); the signal arrives once metrics.jsonl has a row.
    Returns the step the run stopped after."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.Popen(_command(overrides, run_dir), env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    while not read_metrics(run_dir / "metrics.jsonl"):
        assert proc.poll() is None, f"run ended before its first row: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "timed out waiting for the first metrics row"
        time.sleep(0.1)
    proc.send_signal(getattr(signal, signal_name))
    _, stderr = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 128 + getattr(signal, signal_name), stderr[-3000:]
    errors = _error_lines(stderr)
    assert len(errors) == 1 and errors[0].startswith(f"error: interrupted by {signal_name}; ") and \
        "Traceback" not in stderr, stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    stopped = summary["metrics"]["steps_completed"]
    assert summary["status"] == "interrupted" and checkpoint_steps(run_dir) == [stopped], (summary, stderr[-2000:])
    assert f"{PREFIX}{stopped}" in errors[0]  # the line names the checkpoint to resume from
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == list(range(1, stopped + 1))

    resumed = subprocess.run(_command([*overrides, f"{steps_key}={stopped + 1}"], run_dir), env=full_env,
                             capture_output=True, text=True, timeout=timeout_s)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"]["resumed_from_step"] == stopped, summary["metrics"]
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == list(range(1, stopped + 2))
    return stopped


def _torchrun(overrides: list[str], run_dir: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
            str(REPO_ROOT / "run.py"), *overrides, f"hydra.run.dir={run_dir}", "progress=false"]


def _rank_pid(parent: int, rank: int, timeout_s: float) -> int:
    """The pid of torchrun's worker of `rank` (a child of `parent` whose environment says RANK=<rank>)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        for pid in children:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if f"RANK={rank}".encode() in environ:
                return int(pid)
        time.sleep(0.1)
    raise AssertionError(f"no worker of rank {rank} under pid {parent}")


def check_one_rank_signal_stops_every_rank(run_dir: Path, overrides: list[str], steps_key: str,
                                           env: dict | None = None, timeout_s: float = 900) -> int:
    """torchrun, 2 ranks; SIGTERM to rank 1 once metrics.jsonl has a row; both ranks stop after the same step
    with its checkpoint, and a rerun (2 ranks) resumes from it. Returns that step."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    port = 29400 + os.getpid() % 500
    proc = subprocess.Popen(_torchrun(overrides, run_dir, port), env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not read_metrics(run_dir / "metrics.jsonl"):
            assert proc.poll() is None, f"run ended before its first row: {proc.stderr.read()[-3000:]}"
            assert time.monotonic() < deadline, "timed out waiting for the first metrics row"
            time.sleep(0.1)
        os.kill(_rank_pid(proc.pid, 1, 30), signal.SIGTERM)
        _, stderr = proc.communicate(timeout=timeout_s)  # ranks that disagree hang in their next collective
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    summary = json.loads((run_dir / "summary.json").read_text())
    stopped = summary["metrics"]["steps_completed"]
    assert summary["status"] == "interrupted" and summary["world_size"] == 2, (summary, stderr[-3000:])
    assert checkpoint_steps(run_dir) == [stopped], stderr[-3000:]  # written by both ranks at the same step
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == list(range(1, stopped + 1))

    resumed = subprocess.run(_torchrun([*overrides, f"{steps_key}={stopped + 1}"], run_dir, port + 1), env=full_env,
                             capture_output=True, text=True, timeout=timeout_s)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"]["resumed_from_step"] == stopped, summary["metrics"]
    return stopped


def check_preempted_job_resumes_like_its_twin(tmp_path: Path, sweep_args: list[str], steps: int,
                                              world_size: int = 1) -> None:
    """A 2-job SLURM sweep (`python run.py -m ...`, the jobs alike): once job 0 has logged 3 rows it gets
    submitit's preempt signal (`scancel --signal=USR2`), checkpoints, requeues itself and resumes in its
    job dir; it must end ok, with every step's row once, two segments, and the same final checkpoint (file
    for file) and deterministic metrics rows as job 1, which ran undisturbed."""
    import re

    sweep = subprocess.Popen([sys.executable, str(REPO_ROOT / "run.py"), "-m", *sweep_args,
                              f"hydra.sweep.dir={tmp_path}"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    job_dir, twin, deadline = tmp_path / "0", tmp_path / "1", time.monotonic() + 600
    while len(read_metrics(job_dir / "metrics.jsonl")) < 3:
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.2)
    # submitit keeps one folder per array task ("<array>_<task>") beside its own hidden files
    array_id = next(d.name.split("_")[0] for d in (tmp_path / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", d.name))
    subprocess.run(["scancel", "--signal=USR2", f"{array_id}_0"], check=True)  # job 1 runs undisturbed
    _, stderr = sweep.communicate(timeout=900)

    segments = [json.loads(line) for line in (job_dir / "segments.jsonl").read_text().splitlines()]
    assert len(segments) == 2, stderr[-3000:]
    resumed_from = segments[1]["resumed_from_step"]
    assert resumed_from and 3 <= resumed_from < steps  # the requeued job started from the signal's checkpoint
    summary = json.loads((job_dir / "summary.json").read_text())
    assert sweep.returncode == 0 and summary["status"] == "ok", stderr[-3000:]
    assert summary["world_size"] == world_size and summary["metrics"]["resumed_from_step"] == resumed_from
    assert [row["step"] for row in read_metrics(job_dir / "metrics.jsonl")] == list(range(1, steps + 1))
    assert len((twin / "segments.jsonl").read_text().splitlines()) == 1
    assert _final_manifest(job_dir) == _final_manifest(twin)
    rows = [[_deterministic(r) for r in read_metrics(d / "metrics.jsonl")] for d in (job_dir, twin)]
    assert rows[0] == rows[1]
