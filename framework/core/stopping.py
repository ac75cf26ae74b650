"""How a run stops early: SIGINT/SIGTERM, a non-finite loss, a full disk.

Signals: the runtime installs `StopSignals` for the whole run. A trainer that sets
`handles_stop_requests = True` checks `self.run.stop_requested` at step boundaries, saves a checkpoint
when its task checkpoints, and returns `TrainingResult(status="interrupted")`; a second signal stops
at once. For any other trainer the first signal stops at once. Either way the run ends with summary
status `interrupted`, one line on stderr and exit status 130 (SIGINT) / 143 (SIGTERM).

SLURM preemption and time limits under submitit (hydra/launcher=submitit_slurm): submitit sends its
preempt signal (SIGUSR2, or $SUBMITIT_PREEMPT_SIGNAL) before the time limit and handles it by requeueing
the job. The runtime treats that signal as a stop request too, and once the trainer has checkpointed and
the records are written it hands the signal to submitit's handler (`requeue()`), which requeues the job;
the requeued job runs in the same job dir and resumes from the checkpoint.

`check_finite(metrics, step)`: trainers call it after each optimizer step, before logging or saving,
so a loss or gradient norm that turned NaN/inf stops the run (status failed) and the last checkpoint
on disk is the last good one.
"""

from __future__ import annotations

import errno
import logging
import math
import numbers
import signal
import threading

from framework.core.errors import RunFailure

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class RunInterrupted(BaseException):
    """Raised by the signal handler (a BaseException, like KeyboardInterrupt: no `except Exception` hides it)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def preempt_signal() -> int:
    """submitit's preempt/time-limit signal: SIGUSR2 unless SUBMITIT_PREEMPT_SIGNAL names another."""
    import os

    return getattr(signal, "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2"), signal.SIGUSR2)


def exit_code(signum: int) -> int:
    return 128 + signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


class StopSignals:
    """SIGINT/SIGTERM handlers for the duration of a run (main thread only; elsewhere nothing is installed)."""

    def __init__(self):
        self.signum: int | None = None
        self.cooperative = False  # the trainer stops at its next step boundary
        self._previous: dict[int, object] = {}
        self._requeue_handler = None  # submitit's handler of its preempt signal, when one is installed

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal_name(self.signum) if self.signum else ""

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        preempt = preempt_signal()
        current = signal.getsignal(preempt)
        if callable(current) and current is not signal.default_int_handler:  # a launcher that requeues on it
            self._requeue_handler = current
            self._previous[preempt] = signal.signal(preempt, self._handle)

    @property
    def requeue_requested(self) -> bool:
        return self.signum is not None and self.signum == preempt_signal() and self._requeue_handler is not None

    def requeue(self) -> None:
        """Hand the preempt signal to the launcher's handler (submitit: checkpoint the callable, requeue, exit)."""
        handler, self._requeue_handler = self._requeue_handler, None
        self.restore()
        handler(self.signum, None)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if self.cooperative and first:
            log.warning("%s: stopping at the next step boundary (checkpoint first); send it again to stop now",
                        self.name)
            return
        raise RunInterrupted(self.signum)


def check_finite(metrics: dict, step: int, keys: tuple[str, ...] = ("loss", "grad_norm")) -> None:
    """RunFailure when one of `keys` in `metrics` is NaN or infinite (call it before logging and saving)."""
    bad = {k: metrics[k] for k in keys  # numbers.Real: a numpy float32 NaN is no `float`, and passed
           if isinstance(metrics.get(k), numbers.Real) and not math.isfinite(metrics[k])}
    if bad:
        shown = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise RunFailure(f"step {step}: {shown} (non-finite); stopped before saving it, the last checkpoint is the "
                         f"last good one; lower the learning rate or check the data")


def disk_full(exc: BaseException, folder=None) -> RunFailure | None:
    """A full disk or quota as one line naming the file (else `folder`), or None for any other error."""
    if isinstance(exc, RunFailure):
        return exc if "disk full" in str(exc) else None
    errno_full = isinstance(exc, OSError) and exc.errno in DISK_FULL
    if not errno_full and "No space left on device" not in str(exc):  # libraries' own errors (safetensors' IoError)
        return None
    filename = getattr(exc, "filename", None) or folder
    where = f" writing {filename}" if filename else ""
    return RunFailure(f"disk full{where} (No space left on device); the run stopped at its first failed write; free space "
                      f"and rerun the same command with the same hydra.run.dir (a task that checkpoints resumes)")
