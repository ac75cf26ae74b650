"""The maxtext backend initialises JAX's process group from the distributed environment, never guessing."""

from __future__ import annotations

import pytest

from framework.core.distributed import detect

jax = pytest.importorskip("jax")


@pytest.mark.parametrize("environ,nodes,expected", [
    ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "node0", "MASTER_PORT": "4000"}, 1, [("node0:4000", 2, 1)]),
    ({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[1-2]",
      "MASTER_PORT": "5000"}, 2, [("gpu1:5000", 4, 3)]),
    ({}, 1, []),  # one process: nothing to initialise
    ({}, 2, [()]),  # a multi-host TPU slice without a launcher: JAX finds its own coordinates
])
def test_jax_distributed_is_initialised_from_dist_env(monkeypatch, environ, nodes, expected):
    from framework.backends.maxtext.adapter import initialize_distributed

    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda *args: calls.append(args))
    initialize_distributed(detect(environ), nodes)
    assert calls == expected
