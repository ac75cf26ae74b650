"""The GRPO trainer's start-up: what overlaps with what before the first step (docs/grpo.md "Start-up").

    convert_config: start_model_source -> the model's small files now (or soon), its weights in the background
    setup:  JAX's devices and the mesh, the data  ||  a thread: the small files, then the tokenizer
            -> waits for the small files (config.json), then the tokenizer (beside init's threads it starved
               on the GIL)
    init:   architecture, update plan, placement, the preflight (shapes only)
            -> the update's and the rollout's compiles start (trainers/aot.py, background threads)
            -> a thread waits for the weights (a random-init build or a download), reads them into host memory
            -> the sampler, the small programs' compiles
            -> wait for the host read and every compile (XLA autotunes with the device to itself; math-verify
               imports meanwhile)
            -> place the weights; then the optimizer state, a resumed checkpoint, the step

The order of the last two is the constraint: no lasting device buffer exists while XLA autotunes, because
on an H100 weights placed beside the autotuner's scratch buffers fragmented the memory pool and the
update's 52 GiB temporary no longer fit (trainers/aot.py). `Startup.metrics()` puts the timeline in the
summary: the compiles' end before the placement's start is pinned by tests/maxtext/test_startup.py.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jax

from framework.backends.maxtext.checkpoint_io import place_params, read_hf_params

log = logging.getLogger(__name__)


# Imported in the background while init waits for the compiles: math-verify (the correctness reward's verifier,
# about 1 s of imports on the dev CPU) was first imported while step 1 scored its completions.
PREIMPORTS = ("math_verify",)


def import_in_background() -> None:
    def load() -> None:
        for name in PREIMPORTS:
            try:
                importlib.import_module(name)
            except ImportError:  # optional: its users fall back without it
                pass

    threading.Thread(target=load, name="preimport", daemon=True).start()


class StepScalars:
    """The step's RNG split and its learning-rate metric as two jitted programs, compiled ahead of time with
    the others (trainers/aot.py): run eagerly, their ten-odd ops compiled one by one in step 1."""

    def __init__(self, schedule: Any):
        self.split = jax.jit(_split_in_two)  # (the next key, the step's key), as jax.random.split's two rows
        self.learning_rate = jax.jit(schedule)  # of an int32 count


def _split_in_two(key: Any) -> tuple[Any, Any]:
    carried, used = jax.random.split(key)
    return carried, used


READ_THREADS = 8  # parameter kinds read at once: 4.3 s for Qwen2.5-0.5B on one thread on an H100 host (warm)


def _run_into(future: Future, work: Any) -> None:
    try:
        future.set_result(work())
    except BaseException as error:  # raised where the result is asked for
        future.set_exception(error)


class Startup:
    """The trainer's start-up from setup's beginning: the model's small files and the tokenizer from a thread
    (started here), the weights read on the host while the compiles run and placed once they have all ended.
    `times`: seconds since setup began."""

    def __init__(self, source: Any):
        self.source = source
        self.began = time.perf_counter()
        self.times: dict[str, float] = {}
        self.aot = None
        self._metadata: Future = Future()
        self._tokenizer: Future = Future()
        threading.Thread(target=self._load_tokenizer, name="tokenizer", daemon=True).start()

    def _load_tokenizer(self) -> None:
        """The thread: the model's small files (the main thread's too), then the tokenizer (without importing
        transformers where framework/models/direct_tokenizer.py reproduces it), while the main thread initialises
        JAX's devices, plans and compiles. A failure is raised where the result is asked for."""
        from framework.models.tokenizer import load_tokenizer

        try:
            directory = self.source.metadata()
        except BaseException as error:
            self._metadata.set_exception(error)
            self._tokenizer.set_exception(error)
            return
        self._metadata.set_result(directory)
        try:
            self._tokenizer.set_result(load_tokenizer(directory))
        except BaseException as error:
            self._tokenizer.set_exception(error)

    def _mark(self, event: str) -> float:
        self.times[event] = time.perf_counter() - self.began
        return self.times[event]

    def metadata(self) -> Path:
        """The directory with config.json, generation_config.json and the tokenizer."""
        return self._metadata.result()

    def tokenizer(self) -> Any:
        self._mark("tokenizer_asked")
        tokenizer = self._tokenizer.result()
        # debug, not info: a bad layout found next in setup and init stays one line (summary.json has the figures)
        log.debug("startup: the tokenizer after %.2f s (waited %.2f s)",
                 self._mark("tokenizer_ready"), self.times["tokenizer_ready"] - self.times["tokenizer_asked"])
        return tokenizer

    def start_reading_weights(self, model_config: Any) -> None:
        """From a thread: wait for the model's weights, then read them into host arrays (CPU only: no device is
        touched), READ_THREADS parameter kinds side by side."""
        def read() -> dict[str, Any]:
            self._mark("weights_asked")
            directory = self.source.weights()
            self._mark("weights_ready")
            host = read_hf_params(directory, model_config, threads=READ_THREADS)
            log.info("startup: weights there after %.2f s (waited %.2f s), read into host memory in %.2f s",
                     self.times["weights_ready"], self.times["weights_ready"] - self.times["weights_asked"],
                     self._mark("host_read") - self.times["weights_ready"])
            return host

        self._host = Future()
        threading.Thread(target=_run_into, args=(self._host, read), name="read-weights", daemon=True).start()

    def load_weights(self, aot: Any, model_config: Any, mesh: Any, rules: Any) -> Any:
        """The params on the devices: read on the host (start_reading_weights) while the compiles run, placed
        once both have ended."""
        self._mark("placement_asked")
        host = self._host.result()
        self._mark("host_waited")
        return self.place_after_compiles(aot, host, model_config, mesh, rules)

    def place_after_compiles(self, aot: Any, host: dict[str, Any], model_config: Any, mesh: Any,
                             rules: Any) -> Any:
        """Wait for every background compile (none when aot is None), then place the weights on the devices."""
        self.aot = aot
        import_in_background()  # while this thread waits (an import beside the tokenizer's slowed it on the GIL)
        if aot is not None:
            aot.wait_all()
        self._mark("compiles_waited")
        params = jax.block_until_ready(place_params(host, model_config, mesh, rules))
        log.info("startup: waited %.2f s for the host read, then %.2f s for the compiles, placed the weights in %.2f s",
                 self.times["host_waited"] - self.times["placement_asked"],
                 self.times["compiles_waited"] - self.times["host_waited"],
                 self._mark("placed") - self.times["compiles_waited"])
        return params

    def metrics(self) -> dict[str, float]:
        t = self.times
        metrics = {"startup_tokenizer_wait_s": t["tokenizer_ready"] - t["tokenizer_asked"],  # init blocked on it
                   "startup_weights_wait_s": t["weights_ready"] - t["weights_asked"],  # the build or download
                   "startup_host_read_s": t["host_read"] - t["weights_ready"],
                   "startup_host_wait_s": t["host_waited"] - t["placement_asked"],  # the placement waiting
                   "startup_compile_wait_s": t["compiles_waited"] - t["host_waited"],  # ... then waiting
                   "startup_place_s": t["placed"] - t["compiles_waited"],
                   "startup_place_start_s": t["compiles_waited"]}
        if self.aot is not None:  # read after the step: a compile that ended after the placement would show
            metrics["startup_compiles_end_s"] = self.aot.finished_at - self.began  # the compile threads' clock
        return metrics | {k: v for k, v in self.source.metrics().items() if v is not None}
