"""Faults a hostile user or a bad day brings: signals, a NaN loss, a full disk, a live run dir, stale sweeps
(issue 11). The runtime is driven in-process with the recording backend; the CLI with the sim backend."""

from __future__ import annotations

import csv
import errno
import json
import os
import signal
import subprocess
import sys

import pytest
from omegaconf import open_dict

from framework.core.checkpoint import CheckpointPolicy, CheckpointStore
from framework.core.errors import ConfigError, DataError, RunFailure
from framework.core.loggers import MetricLogger, read_metrics
from framework.core.rundir import LOCK, RunLock, launch_id, run_stamp
from framework.core.runtime import Runtime
from framework.core.stopping import RunInterrupted, check_finite, disk_full
from tests.conftest import compose_config, run_cli

SIM = ["backend=sim", "task=sim", "model=qwen3_8b", "hardware=h100"]
RECORDING = ["backend=sim", "task=sim", "model=tiny_qwen2", "hardware=cpu",
             "backend.adapter._target_=tests.core.recording_backend.RecordingAdapter"]


def recording_cfg(task: str, fault: str):
    cfg = compose_config(["model=tiny_qwen2", "hardware=cpu"])
    with open_dict(cfg):
        cfg.backend = {"name": "recording", "adapter": {"_target_": "tests.core.recording_backend.RecordingAdapter",
                                                        "fail_in": fault}}
        cfg.task = {"name": task}
        cfg[task] = {"checkpoint": {"every": 1, "keep": 10, "resume": True}}  # the resume check reads the policy
        del cfg["sim"]
    return cfg


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def error_lines(proc):
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


# ---- signals ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_trainer_at_once_with_status_interrupted(tmp_path, name):
    runtime = Runtime(recording_cfg("record", name), tmp_path, [])
    result = runtime.run()
    assert result.status == "interrupted" and isinstance(runtime.exception, RunInterrupted)
    assert runtime.exception.signum == getattr(signal, name)
    assert summary(tmp_path)["status"] == "interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored after the run


def test_a_stop_handling_trainer_checkpoints_at_the_step_boundary_then_resumes(tmp_path):
    result = Runtime(recording_cfg("record_steps", "SIGTERM:2"), tmp_path, []).run()
    assert result.status == "interrupted" and result.metrics["steps_completed"] == 2
    assert CheckpointStore(tmp_path, CheckpointPolicy(1, 10, True)).steps() == [1, 2]
    resumed = Runtime(recording_cfg("record_steps", "SIGTERM:2"), tmp_path, []).run()  # the same setup; step 2 is past
    assert resumed.status == "ok" and resumed.metrics == {"steps_completed": 5, "resumed_from_step": 2}


def test_a_second_signal_stops_at_once_without_finishing_the_step(tmp_path):
    runtime = Runtime(recording_cfg("record_steps", "twice:2"), tmp_path, [])
    assert runtime.run().status == "interrupted" and isinstance(runtime.exception, RunInterrupted)
    assert CheckpointStore(tmp_path, CheckpointPolicy(1, 10, True)).steps() == [1]
    assert summary(tmp_path)["status"] == "interrupted"


def test_the_submitit_preempt_signal_checkpoints_then_hands_over_to_the_requeue_handler(tmp_path):
    """submitit installs a SIGUSR2 handler that requeues the job; the run checkpoints and writes its records
    first, then calls it (the requeued job resumes in the same dir, as the signal test above shows)."""
    calls = []

    def submitit_requeue(signum, frame):
        calls.append((signum, summary(tmp_path)["status"], CheckpointStore(tmp_path, CheckpointPolicy(1, 10, True)).steps()))

    previous = signal.signal(signal.SIGUSR2, submitit_requeue)
    try:
        result = Runtime(recording_cfg("record_steps", "SIGUSR2:2"), tmp_path, []).run()
        assert result.status == "interrupted"
        assert calls == [(signal.SIGUSR2, "interrupted", [1, 2])]
        assert signal.getsignal(signal.SIGUSR2) is submitit_requeue  # restored for the rest of the process
    finally:
        signal.signal(signal.SIGUSR2, previous)


def test_without_a_launcher_handler_the_preempt_signal_is_left_alone(tmp_path):
    from framework.core.stopping import StopSignals

    signals = StopSignals()
    signals.install()
    try:
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL and not signals.requeue_requested
    finally:
        signals.restore()


@pytest.mark.parametrize("name,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_cli_exit_status_and_one_line_after_a_signal(tmp_path, name, code):
    proc = run_cli([*RECORDING, "task.name=record_steps", f"+backend.adapter.fail_in={name}:2",
                    "+record_steps.checkpoint={every: 1, keep: 10, resume: true}",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == code, proc.stderr
    assert error_lines(proc) == [f"error: interrupted by {name}; {tmp_path}/checkpoints/step_2 holds the last "
                                 f"checkpoint; rerun the same command with hydra.run.dir={tmp_path} to resume"]
    assert "Traceback" not in proc.stderr and summary(tmp_path)["status"] == "interrupted"


def test_a_sweep_stopped_by_a_signal_writes_the_table_of_the_jobs_it_ran(tmp_path):
    """Hydra calls no on_multirun_end after an interrupt: a Ctrl-C'd sweep left no sweep_summary.md of the jobs it
    had run (exit 130, 'error: interrupted by SIGINT' alone). Job 1 signals itself in its step 2; job 2 never starts."""
    proc = run_cli(["-m", *RECORDING, "task.name=record_steps", "task.objective=null",
                    "+backend.adapter.fail_in=none:0,SIGINT:2,none:1",
                    "+record_steps.checkpoint={every: 1, keep: 10, resume: true}", f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 130, proc.stderr
    [line] = error_lines(proc)
    assert line.startswith(f"error: interrupted by SIGINT; {tmp_path}/1/checkpoints/step_2 holds the last checkpoint")
    assert line.endswith(f"; the sweep's jobs so far: {tmp_path}/sweep_summary.md")
    with (tmp_path / "sweep_summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["job"], row["status"]) for row in rows] == [("0", "ok"), ("1", "interrupted")]


def test_a_sweep_interrupted_before_any_job_writes_no_empty_table(tmp_path):
    """Stopped before a job made its folder (submitit still starting its processes): no one-column table of nothing,
    and the interrupt's line names none."""
    from omegaconf import OmegaConf

    from framework.core import sweep

    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "task": {"key_metrics": ["loss"]}})
    sweep.UNDER_WAY[:] = [(sweep.SweepSummaryCallback(), config)]
    assert sweep.summarise_interrupted() is None and not sweep.UNDER_WAY
    assert not (tmp_path / "sweep_summary.md").exists()


# ---- non-finite loss ----------------------------------------------------------------------------

def test_a_nan_loss_fails_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    result = Runtime(recording_cfg("record_steps", "nan:3"), tmp_path, []).run()
    assert result.status == "failed" and "step 3: loss=nan (non-finite)" in result.error
    assert CheckpointStore(tmp_path, CheckpointPolicy(1, 10, True)).steps() == [1, 2]
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_check_finite_names_every_bad_key():
    check_finite({"loss": 1.0, "grad_norm": 0.0, "reward": float("nan")}, 1)  # only loss and grad norm count
    with pytest.raises(RunFailure, match=r"step 4: loss=inf, grad_norm=nan \(non-finite\)"):
        check_finite({"loss": float("inf"), "grad_norm": float("nan")}, 4)
    import numpy as np

    with pytest.raises(RunFailure, match=r"step 5: grad_norm=nan"):  # a float32 NaN was no float: it passed
        check_finite({"loss": 1.0, "grad_norm": np.float32("nan")}, 5)


# ---- full disk ----------------------------------------------------------------------------------

def test_enospc_in_a_trainer_is_one_run_failure_line(tmp_path):
    runtime = Runtime(recording_cfg("record", "enospc"), tmp_path, [])
    result = runtime.run()
    assert result.status == "failed" and isinstance(runtime.exception, RunFailure)
    assert str(runtime.exception).startswith(f"disk full writing {tmp_path} (No space left on device)")


def test_enospc_while_writing_the_summary_fails_the_run(tmp_path, monkeypatch):
    from framework.core import records

    def full(path, text):
        if path.name == "summary.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, text)

    original = records.write_atomic
    monkeypatch.setattr(records, "write_atomic", full)
    runtime = Runtime(recording_cfg("record", "none"), tmp_path, [])
    runtime.run()
    assert "disk full writing" in str(runtime.exception) and "summary.json" in str(runtime.exception)


def test_safetensors_style_disk_full_message_is_recognised():
    error = RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                         "\"No space left on device\" })")
    assert "disk full" in str(disk_full(error)) and disk_full(ValueError("other")) is None


def test_a_failed_checkpoint_write_leaves_the_previous_checkpoint_and_no_staging(tmp_path):
    store = CheckpointStore(tmp_path, CheckpointPolicy(1, 5, True))
    store.save(1, lambda folder: (folder / "w.bin").write_bytes(b"1"))

    def full(folder):
        (folder / "w.bin").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        store.save(2, full)
    assert store.steps() == [1] and store.latest().step == 1
    assert [p.name for p in store.root.iterdir()] == ["step_1"]


def test_a_cut_off_last_metrics_row_is_dropped_and_logging_continues(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')
    assert read_metrics(path) == [{"step": 1, "loss": 2.0}]
    logger = MetricLogger(tmp_path)
    logger.rewind(1)
    logger.log({"loss": 1.0}, 2)
    logger.close()
    assert [row["step"] for row in read_metrics(path)] == [1, 2]


def test_a_damaged_middle_metrics_row_names_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, garbage\n{"step": 3}\n')
    with pytest.raises(DataError, match=rf"{path}:2: not a JSON metrics row"):
        read_metrics(path)


def tmpfs(folder, size_kb: int) -> bool:
    if os.geteuid() != 0:
        return False
    folder.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


@pytest.mark.parametrize("fill_kb", [195, 185, 176, 150])
def test_cli_on_a_full_disk_stops_with_one_line_and_reruns(tmp_path, fill_kb):
    """A real full file system (tmpfs, root only): each fill level makes a different record's write fail."""
    disk = tmp_path / "disk"
    if not tmpfs(disk, 200):
        pytest.skip("mounting a tmpfs needs root")
    try:
        (disk / "fill").write_bytes(b"\0" * fill_kb * 1024)
        proc = run_cli([*SIM, f"hydra.run.dir={disk}/run"])
        assert proc.returncode == 1, proc.stderr
        assert len(error_lines(proc)) == 1 and error_lines(proc)[0].startswith("error: disk full")
        assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr
        (disk / "fill").unlink()
        again = run_cli([*SIM, f"hydra.run.dir={disk}/run"])
        assert again.returncode == 0, again.stderr
        assert summary(disk / "run")["status"] == "ok" and not (disk / "run" / LOCK).exists()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


# ---- run dirs -----------------------------------------------------------------------------------

def test_run_stamps_differ_between_processes_and_ranks_of_a_launch_share_one():
    code = "from framework.core.rundir import run_stamp; print(run_stamp())"
    stamps = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout for _ in range(2)}
    assert len(stamps) == 2
    assert launch_id({"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "0"}) == "slurm41.0"
    assert launch_id({"SLURM_JOB_ID": "41"}) is None  # a shell inside an allocation: not a launch of ranks
    assert launch_id({"TORCHELASTIC_RUN_ID": "abc"}) == "torchrunabc"
    assert launch_id({"TORCHELASTIC_RUN_ID": "none"}) is None
    assert run_stamp("sweep").endswith(f"_p{os.getpid()}")


def test_two_runs_started_together_get_two_dirs(tmp_path):
    args = [sys.executable, "run.py", *SIM, f"hydra.run.dir={tmp_path}/${{run_stamp:run}}"]
    from tests.conftest import REPO_ROOT
    procs = [subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    dirs = list(tmp_path.iterdir())
    assert len(dirs) == 2 and all(len(read_metrics(d / "metrics.jsonl")) == 1 for d in dirs)


def test_a_live_run_dir_is_refused_and_left_untouched(tmp_path):
    (tmp_path / LOCK).write_text(json.dumps({"host": os.uname().nodename, "pid": os.getpid(), "started": "t"}))
    proc = run_cli([*SIM, f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2
    assert error_lines(proc) == [f"error: {tmp_path}: run dir in use by pid {os.getpid()} on {os.uname().nodename} "
                                 f"(started t); wait for it or use another hydra.run.dir"]
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("content", ['{"host": "HOST", "pid": DEAD}', '{"host": "HOST", "pi'])
def test_a_dead_or_cut_off_lock_is_taken_over(tmp_path, content):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = os.uname().nodename
    (tmp_path / LOCK).write_text(content.replace("HOST", host).replace("DEAD", dead.stdout.strip()))
    lock = RunLock(tmp_path)
    lock.acquire()
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK).exists()


def test_another_hosts_lock_is_respected(tmp_path):
    (tmp_path / LOCK).write_text(json.dumps({"host": "elsewhere", "pid": 1}))
    with pytest.raises(ConfigError, match="in use by pid 1 on elsewhere"):
        RunLock(tmp_path).acquire()


# ---- sweeps -------------------------------------------------------------------------------------

def test_a_second_sweep_into_the_same_dir_ignores_stale_jobs_and_failures(tmp_path):
    sweep = tmp_path / "sweep"
    first = run_cli(["-m", *SIM, "sim.batch=1,2", "model.hf_config.hidden_size=64,-1", f"hydra.sweep.dir={sweep}"])
    assert first.returncode == 1 and "2 of 4 jobs failed" in first.stderr
    second = run_cli(["-m", *SIM, "sim.batch=3", f"hydra.sweep.dir={sweep}"])
    assert second.returncode == 0, second.stderr
    rows = (sweep / "sweep_summary.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("0,") and ",3," in rows[1]


def test_a_name_becomes_one_flat_part_of_a_folder_name(monkeypatch):
    """conf/config.yaml's `${path_parts:...}` and a torchrun id (its --rdzv-id is typed freely) in the run dir."""
    from framework.core.paths import PART_BYTES, path_part

    assert path_part("Qwen/Qwen3-8B") == "Qwen--Qwen3-8B" and path_part("a\\b c:d") == "a--b-c-d"
    assert path_part("qwen3_8b") == "qwen3_8b" and path_part("v1.5+x=y@z,w-q") == "v1.5+x=y@z,w-q"
    cut = path_part("é" * 200)  # 2 bytes each: cut on a character, within PART_BYTES bytes
    assert cut == "é" * (PART_BYTES // 2) and len(cut.encode()) <= PART_BYTES
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "team/job 7")
    assert run_stamp() == "torchrunteam--job-7"


def test_three_long_names_and_a_long_torchrun_id_still_make_one_folder_name(monkeypatch):
    """Each name was cut to PART_BYTES alone: backend.name, task.name and model.name of 300 characters made a 320-byte
    folder name, exit 1 with `OSError: File name too long`; with a torchrun id of 300 the stamp takes PART_BYTES too."""
    from pathlib import Path

    from framework.core.paths import NAME_BYTES, PART_BYTES, path_parts

    assert path_parts("Qwen/Qwen3-8B", "a b") == "Qwen--Qwen3-8B_a-b"
    assert len(path_parts("x" * 300, "y" * 300, "z" * 300)) == NAME_BYTES
    cut = path_parts("é" * 200, "é" * 200)  # 2 bytes each: cut on a character
    assert cut == "é" * (PART_BYTES // 2) + "_" + "é" * ((NAME_BYTES - PART_BYTES - 1) // 2)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "r" * 300)
    for kind in ("run", "sweep"):
        cfg = compose_config(["backend=sim", "task=sim", "model=qwen3_8b", *(f"{key}.name={'n' * 300}" for key in (
            "backend", "task", "model"))], return_hydra_config=True)
        name = Path(cfg.hydra[kind].dir).name
        assert len(name.encode()) <= 255 and name.endswith("_" + "n" * 100 + "_" + "n" * 49), (kind, len(name))
