"""A backend used only by the core tests: it records the lifecycle calls the runtime makes."""

from __future__ import annotations

from framework.core.adapter import BackendAdapter
from framework.core.patches import Phase, register_patch
from framework.core.result import TrainingResult
from framework.core.trainer import BaseTrainer

CALLS: list[str] = []


class RecordingAdapter(BackendAdapter):
    name = "recording"
    trainers = {"record": "tests.core.recording_backend:RecordingTrainer"}
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
