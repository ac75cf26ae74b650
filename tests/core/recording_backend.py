"""A backend used only by the core tests: it records the lifecycle calls the runtime makes."""

from __future__ import annotations

import errno
import os
import signal
import time

from framework.core.adapter import BackendAdapter
from framework.core.checkpoint import CheckpointPolicy
from framework.core.patches import Phase, register_patch
from framework.core.result import TrainingResult
from framework.core.stopping import check_finite
from framework.core.trainer import BaseTrainer

CALLS: list[str] = []


class RecordingAdapter(BackendAdapter):
    name = "recording"
    trainers = {"record": "tests.core.recording_backend:RecordingTrainer",
                "record_steps": "tests.core.recording_backend:SteppingTrainer"}
    libraries = ("recording-lib", "hydra-core")
    patch_modules = ("tests.core.recording_backend",)

    def __init__(self, fail_in: str = "", version: str = "1.0"):
        self.fail_in = fail_in
        self.version = version

    def prepare_backend(self, cfg):
        CALLS.append("prepare_backend")

    def convert_config(self, cfg):
        CALLS.append("convert_config")
        return {"fail_in": self.fail_in}

    def detect_versions(self):
        return {**super().detect_versions(), "recording-lib": self.version}


class RecordingTrainer(BaseTrainer):
    def _call(self, name: str):
        CALLS.append(name)
        if self.config["fail_in"] == name:
            raise RuntimeError(f"boom in {name}")

    def setup(self):
        self._call("setup")

    def init(self):
        self._call("init")

    def run_train(self):
        self._call("run_train")
        fault = self.config["fail_in"]
        if fault in ("SIGINT", "SIGTERM"):  # a trainer that does not handle stop requests: stopped at once
            os.kill(os.getpid(), getattr(signal, fault))
            time.sleep(5)
            raise AssertionError("the signal did not stop the run")
        if fault == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device")
        self.run.logger.log({"loss": 1.5}, step=1)
        return TrainingResult(success=True, metrics={"loss": 1.5}, samples=4)

    def cleanup(self):
        CALLS.append("cleanup")


@register_patch("recording.setup", backend="recording", phase=Phase.SETUP)
def _setup_patch(ctx):
    CALLS.append("patch:setup")


@register_patch("recording.before", backend="recording", phase=Phase.BEFORE_TRAIN, requires={"recording-lib": ">=1.0", "hydra-core": ">=1.3"})
def _before_patch(ctx):
    CALLS.append("patch:before_train")


@register_patch("recording.after", backend="recording", phase="after_train")
def _after_patch(ctx):
    CALLS.append("patch:after_train")


class SteppingTrainer(BaseTrainer):
    """Steps with checkpoints, handling stop requests as a real trainer does: `fail_in` names a signal sent
    to itself during step 2 ("SIGTERM:2"; "twice:2" sends two), or "nan:3" makes step 3's loss NaN."""

    handles_stop_requests = True
    STEPS = 5

    def init(self):
        self.store = self.run.checkpoints(CheckpointPolicy(every=1, keep=10, resume=True))
        resumed = self.store.resume_point()
        self.start = resumed.step if resumed else 0

    def run_train(self):
        fault, _, at = self.config["fail_in"].partition(":")
        done = self.start
        for step in range(self.start + 1, self.STEPS + 1):
            if self.run.stop_requested:
                break
            if fault in ("SIGINT", "SIGTERM", "SIGUSR2", "twice") and step == int(at):
                os.kill(os.getpid(), getattr(signal, fault, signal.SIGTERM))
                if fault == "twice":  # the second signal stops at once, inside the step
                    os.kill(os.getpid(), signal.SIGTERM)
            loss = float("nan") if fault == "nan" and step == int(at) else 1.0 / step
            check_finite({"loss": loss}, step)
            self.run.logger.log({"loss": loss}, step)
            self.store.save(step, lambda folder: (folder / "w.txt").write_text(str(step)), {})
            done = step
        interrupted = done < self.STEPS
        return TrainingResult(success=not interrupted, metrics={"steps_completed": done, "resumed_from_step": self.start},
                              artifacts={"last_checkpoint": str(self.store.root / f"step_{done}")},
                              status="interrupted" if interrupted else "ok")
