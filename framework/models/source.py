"""A model directory whose small files come first and whose weights arrive in the background.

config.json, generation_config.json and the tokenizer are all a run needs to pick its update plan and
compile its programs; the weights are needed only when they are placed on the devices. `start_model_source`
hands out the small files as soon as they exist and keeps getting the weights meanwhile:

- model.path: everything is there already;
- model.random_init: framework/models/tiny.py builds the model in a child process (`python -m
  framework.models.source`), so torch is never imported by the run's process and its tracing never contends
  with torch's initialisation for the GIL; the child publishes the metadata directory first
  (tiny.metadata_dir), then the whole build, each atomically, exactly as the synchronous build does; a second
  child builds only the metadata with torch hidden, which spares it torch's import;
- model.hub_id: the small files are fetched at once (offline and uncached: the one-line ConfigError of
  framework/models/hub.py), the weights by a background thread.

Backends that load their model in one piece keep calling tiny.resolve_model_dir.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from framework.core import errors
from framework.core.errors import CrucibleError, DataError
from framework.core.paths import REPO_ROOT
from framework.core.plain import to_plain

METADATA_LINE = "metadata"  # the child's stdout once tiny.metadata_dir is published
METADATA_ONLY = "--metadata-only"  # the child that builds only the metadata, without torch


class ModelSource:
    """`metadata()`: a directory with config.json, generation_config.json and the tokenizer (blocks until
    it exists); `weights()`: the complete model directory (blocks until it is built or downloaded; raises
    the build's CrucibleError). `metrics()`: the seconds it took and what the caller waited."""

    def __init__(self, name: str, metadata: Callable[[], Path], weights: Callable[[], Path],
                 stop: Callable[[], None] = lambda: None):
        self.name = name
        self._metadata, self._weights, self._stop = metadata, weights, stop
        self.started = time.perf_counter()
        self.ready_s: float | None = None  # from the start to the weights being there
        self.waited_s = 0.0  # what metadata() and weights() blocked
        self._locks = {metadata: threading.Lock(), weights: threading.Lock()}  # callers in several threads
        self._outcomes: dict[Callable, tuple[bool, Any]] = {}  # each asked once: later callers get the same

    @classmethod
    def ready(cls, name: str, directory: str | Path) -> "ModelSource":
        source = cls(name, lambda: Path(directory), lambda: Path(directory))
        source.ready_s = 0.0
        return source

    def metadata(self) -> Path:
        return self._timed(self._metadata)

    def weights(self) -> Path:
        directory = self._timed(self._weights)
        if self.ready_s is None:
            self.ready_s = time.perf_counter() - self.started
        return directory

    def _timed(self, get: Callable[[], Path]) -> Path:
        began = time.perf_counter()
        try:
            with self._locks[get]:
                if get not in self._outcomes:
                    try:
                        self._outcomes[get] = (True, get())
                    except BaseException as error:  # the same one line for every caller
                        self._outcomes[get] = (False, error)
                ok, outcome = self._outcomes[get]
                if not ok:
                    raise outcome
                return outcome
        finally:
            self.waited_s += time.perf_counter() - began

    def metrics(self) -> dict[str, float]:
        return {"model_ready_s": self.ready_s, "model_wait_s": self.waited_s}

    def close(self) -> None:
        """Stop a build still running (its staging directory is never published)."""
        self._stop()


def start_model_source(model_cfg: Mapping[str, Any], cache_root: Path) -> ModelSource:
    """The model of `model_cfg` (the `model` node) as a ModelSource; see the module doc."""
    from framework.models import tiny

    name = str(model_cfg.get("name") or "model")
    if model_cfg.get("path") or not (model_cfg.get("random_init") or model_cfg.get("hub_id")):
        return ModelSource.ready(name, tiny.resolve_model_dir(model_cfg, cache_root))  # its checks, its errors
    if not model_cfg.get("random_init"):  # resolve_model_dir's order: path, random_init, hub_id
        return _hub_source(name, str(model_cfg["hub_id"]))
    out_dir = tiny.tiny_model_dir(model_cfg, Path(cache_root).absolute())  # the child builds from the repo root
    complete, has_metadata = tiny.published(model_cfg, out_dir)
    if complete:
        return ModelSource.ready(name, out_dir)
    return _TinyBuild(name, to_plain(model_cfg), out_dir, has_metadata).source


def _hub_source(name: str, hub_id: str) -> ModelSource:
    from framework.models.hub import hub_metadata, hub_snapshot

    metadata = Path(hub_metadata(hub_id))
    result: dict[str, Any] = {}

    def download() -> None:
        try:
            result["dir"] = Path(hub_snapshot(hub_id))
        except BaseException as error:  # raised in the caller's thread by weights()
            result["error"] = error

    thread = threading.Thread(target=download, name="model-download", daemon=True)
    thread.start()

    def weights() -> Path:
        thread.join()
        if "error" in result:
            raise result["error"]
        return result["dir"]

    return ModelSource(name, lambda: metadata, weights)


class _TinyBuild:
    """tiny.build_tiny_model in a child process; its stdout says when the metadata is published, its last
    line (JSON) names a failure. A second child builds only the metadata, with torch hidden from it
    (transformers' config classes import torch when it is installed: seconds on a fresh machine); should it
    fail, the metadata comes from the first."""

    def __init__(self, name: str, model_cfg: dict, out_dir: Path, has_metadata: bool):
        self.name, self.out_dir = name, out_dir
        self.log = tempfile.TemporaryFile(mode="w+")  # the child's stderr: read back on a crash
        self.process = self._spawn(model_cfg, out_dir, self.log)
        self.fast = None if has_metadata else self._spawn(model_cfg, out_dir, subprocess.DEVNULL, METADATA_ONLY)
        self.lines: list[str] = []
        self.has_metadata = has_metadata
        self.source = ModelSource(name, self.metadata, self.weights, self.stop)

    @staticmethod
    def _spawn(model_cfg: dict, out_dir: Path, stderr: Any, *flags: str) -> subprocess.Popen:
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        return subprocess.Popen(  # its own session: a ^C stops the run, which then stops the build
            [sys.executable, "-m", "framework.models.source", json.dumps(model_cfg), str(out_dir), *flags],
            stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO_ROOT, env=env, start_new_session=True)

    def metadata(self) -> Path:
        from framework.models.tiny import metadata_dir

        if not self.has_metadata and self.fast is not None:
            self.has_metadata = METADATA_LINE in self.fast.communicate()[0].splitlines()
        while not self.has_metadata:
            line = self.process.stdout.readline()
            if not line:  # the child ended without publishing the metadata: failed, or found the model built
                return self.weights()  # raises its error; a complete model directory holds the small files too
            self.lines.append(line.strip())
            self.has_metadata = self.lines[-1] == METADATA_LINE
        return metadata_dir(self.out_dir)

    def weights(self) -> Path:
        self.lines += [line.strip() for line in self.process.stdout]  # until the child closes it
        if self.process.wait() != 0:
            raise self._error()
        return self.out_dir

    def _error(self) -> CrucibleError:
        failure = json.loads(self.lines[-1]) if self.lines and self.lines[-1].startswith("{") else None
        if failure and failure["type"] in _CRUCIBLE_ERRORS:  # bad input: its own one line
            return _CRUCIBLE_ERRORS[failure["type"]](failure["message"])
        if failure:
            reason = f"{failure['type']}: {failure['message']}"
        else:  # killed, or died before it could say why
            text = "" if self.log.closed else (self.log.seek(0), self.log.read())[1]
            last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
            reason = f"exit status {self.process.returncode}: {last[0][:300]}"
        return DataError(f"model {self.name!r}: building the random-init model in {self.out_dir} failed ({reason}); "
                         f"nothing was published there: fix the cause and rerun, or set model.path to a local "
                         f"HF model directory")

    def stop(self) -> None:
        """SIGTERM: the child removes its staging directory (a SIGKILL after 10 s leaves it, hidden, unused)."""
        running = [p for p in (self.fast, self.process) if p is not None and p.poll() is None]
        for process in running:
            process.terminate()
        for process in running:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()


_CRUCIBLE_ERRORS = {cls.__name__: cls for cls in vars(errors).values()
                    if isinstance(cls, type) and issubclass(cls, CrucibleError)}


def _build(model_cfg: dict, out_dir: Path, metadata_only: bool) -> int:
    """The child: build, say when the metadata is published, report a failure as one JSON line."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # unwinds: staging is removed
    if metadata_only:
        sys.modules["torch"] = None  # transformers then takes torch as not installed (the files are the same)
    else:  # the weights are needed last: the run's compiles, on the way to the first step, get the CPU first
        os.nice(5)
    from framework.models.tiny import build_tiny_model

    try:
        build_tiny_model(model_cfg, out_dir, on_metadata=lambda _: print(METADATA_LINE, flush=True),
                         metadata_only=metadata_only)
    except Exception as error:  # every failure reaches the run as one line
        message = str(error).splitlines()[0] if str(error) else ""
        print(json.dumps({"type": type(error).__name__, "message": message}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_build(json.loads(sys.argv[1]), Path(sys.argv[2]), METADATA_ONLY in sys.argv[3:]))
