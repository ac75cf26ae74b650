"""backend=megatron tests: skipped as a whole where megatron-core is not installed."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One cache (tiny model builds, tokenised data) for the whole megatron test session."""
    return tmp_path_factory.mktemp("megatron_cache")


@pytest.fixture(scope="module")
def megatron_world():
    """A single-process gloo world with megatron's parallel_state (tp=pp=1) and the CPU patches, torn down
    after the module (other tests of the session may start their own process group)."""
    from framework.backends.megatron.distributed import Layout, init_model_parallel, init_process_group, shutdown
    from framework.backends.megatron.patches import cpu_clip_grad, cpu_device, cpu_rng
    from framework.core.distributed import detect

    cpu_device.install()
    cpu_rng.install()
    cpu_clip_grad.install()
    init_process_group(detect({}), on_gpu=False)
    layout = Layout(tp=1, pp=1, cp=1, dp=1, shard_optimizer=False)
    init_model_parallel(layout, seed=0)
    yield layout
    shutdown()
