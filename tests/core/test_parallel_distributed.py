"""One parallel vocabulary (resolve -1, check products) and the distributed environment from launchers."""

import pytest

from framework.core.distributed import detect, first_slurm_host
from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig


def layout(**sizes):
    return ParallelConfig(**{"dp": 1, "fsdp": 1, "tp": 1, "pp": 1, "ep": 1, "cp": 1, **sizes})


def test_minus_one_takes_the_remaining_devices():
    resolved = layout(fsdp=-1, tp=2, ep=2).resolve(8)
    assert (resolved.fsdp, resolved.tp, resolved.devices, resolved.data_parallel) == (4, 2, 8, 4)


@pytest.mark.parametrize("sizes, devices, message", [
    ({"tp": 3}, 8, "uses 3 devices"),
    ({"dp": -1, "fsdp": -1}, 8, "only one axis"),
    ({"tp": 0}, 8, "parallel.tp: 0"),
    ({"dp": 2, "ep": 4}, 2, "parallel.ep: 4 must divide"),
    ({"dp": -1, "tp": 3}, 8, "do not split"),
])
def test_impossible_layouts_name_the_axis(sizes, devices, message):
    with pytest.raises(ConfigError, match=message):
        layout(**sizes).resolve(devices)


def test_torchrun_slurm_and_single_process():
    torchrun = detect({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "node7", "MASTER_PORT": "1234"})
    assert (torchrun.rank, torchrun.local_rank, torchrun.num_nodes, torchrun.init_method) == (3, 1, 2, "tcp://node7:1234")
    assert not torchrun.is_main
    slurm = detect({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NNODES": "2",
                    "SLURM_JOB_NODELIST": "gpu[003-004]", "SLURM_JOB_ID": "42"})
    assert (slurm.rank, slurm.local_rank, slurm.master_addr, slurm.launcher) == (5, 1, "gpu003", "slurm")
    single = detect({})
    assert single.is_main and not single.is_distributed and single.launcher == "single"


def test_first_slurm_host():
    assert first_slurm_host("gpu[003-005,9],cpu1") == "gpu003"
    assert first_slurm_host("node12") == "node12"


def test_submitit_local_tasks_and_a_single_slurm_task():
    submitit = detect({"SUBMITIT_LOCAL_GLOBALID": "1", "SUBMITIT_LOCAL_LOCALID": "1", "SUBMITIT_LOCAL_NTASKS": "2"})
    assert (submitit.rank, submitit.world_size, submitit.launcher, submitit.coordinator) == (
        1, 2, "submitit", "127.0.0.1:29500")
    alone = detect({"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "gpu001"})
    assert alone.launcher == "single" and alone.is_main  # one srun task is a world of one
