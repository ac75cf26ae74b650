"""torch.distributed and megatron's parallel_state from the run's `parallel` node and DistEnv.

gloo on a CPU, nccl on GPUs; a world of one still gets a (single-process) group on a free port,
because megatron's DDP, optimizer and schedules call collectives unconditionally.
Mapping of Crucible's axes: tp -> tensor_model_parallel_size, pp -> pipeline_model_parallel_size,
cp -> context_parallel_size; dp x fsdp ranks are megatron's data-parallel ranks (fsdp > 1 turns on
the distributed optimizer: optimizer state sharded over them, ZeRO-1 style).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from framework.core.distributed import DistEnv
from framework.core.errors import BackendError, ConfigError
from framework.core.parallel import ParallelConfig, check_dense

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    cp: int
    dp: int  # megatron data-parallel ranks (Crucible dp x fsdp)
    shard_optimizer: bool  # the distributed optimizer (fsdp > 1)

    def as_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "dp": self.dp}


def check_axes(parallel: ParallelConfig, layer_spec: str, on_gpu: bool) -> None:
    """What megatron cannot run whatever the number of ranks (a -1 axis is judged once resolved)."""
    # the axes named instead of ep: fsdp only where it runs (it needs CUDA, below)
    check_dense(parallel.ep, "megatron", ("fsdp", "dp", "tp", "pp") if on_gpu else ("dp", "tp", "pp"))
    if parallel.cp > 1 and layer_spec != "te":
        raise ConfigError(f"parallel.cp: {parallel.cp} needs layer_spec=te (megatron's local attention has no "
                          f"context parallelism); use cp=1")
    if parallel.fsdp > 1 and not on_gpu:
        raise ConfigError(f"parallel.fsdp: {parallel.fsdp} shards the optimizer state (megatron's distributed "
                          f"optimizer), which needs CUDA; on a CPU use parallel.dp=-1 parallel.fsdp=1")


def resolve_layout(parallel: ParallelConfig, world_size: int, layer_spec: str, on_gpu: bool) -> Layout:
    """The layout over the launched ranks; ConfigError when it does not fit them or megatron."""
    resolved = parallel.resolve(world_size)
    check_axes(resolved, layer_spec, on_gpu)
    return Layout(tp=resolved.tp, pp=resolved.pp, cp=resolved.cp, dp=resolved.data_parallel,
                  shard_optimizer=resolved.fsdp > 1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_process_group(env: DistEnv, on_gpu: bool) -> None:
    """Join (or, alone, create) the default process group; set this rank's GPU."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if on_gpu:
        if not torch.cuda.is_available():
            raise BackendError("hardware.accelerator=gpu but torch sees no CUDA device; use hardware=cpu")
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
    init_method = env.init_method if env.is_distributed else f"tcp://127.0.0.1:{free_port()}"
    dist.init_process_group("nccl" if on_gpu else "gloo", init_method=init_method, rank=env.rank,
                            world_size=env.world_size)


def init_model_parallel(layout: Layout, seed: int) -> None:
    """parallel_state's groups and megatron's per-rank RNG streams."""
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=layout.tp,
                                                 pipeline_model_parallel_size=layout.pp,
                                                 context_parallel_size=layout.cp)
    model_parallel_cuda_manual_seed(seed)


def shutdown() -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def set_cpu_threads(env: DistEnv) -> None:
    """Several ranks on one CPU share its cores instead of each taking all of them."""
    import torch

    if env.local_world_size > 1 and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // env.local_world_size))
