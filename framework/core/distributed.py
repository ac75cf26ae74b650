"""Which process of a multi-process job this is, from the launcher's environment (no heavy import).

torchrun sets RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; SLURM (srun) sets SLURM_PROCID,
SLURM_LOCALID, SLURM_NTASKS, SLURM_NNODES and the node list; submitit's local executor sets
SUBMITIT_LOCAL_*. Every rank runs the whole lifecycle (a multi-host trainer needs all of them); only
the main rank writes the run records. Backends initialise their process group from `DistEnv`
(`torch.distributed.init_process_group(init_method=env.init_method, ...)`,
`jax.distributed.initialize(env.coordinator, env.world_size, env.rank)`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

DEFAULT_PORT = 29500


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    num_nodes: int
    master_addr: str
    master_port: int
    launcher: str  # torchrun | slurm | submitit | single

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def coordinator(self) -> str:
        return f"{self.master_addr}:{self.master_port}"

    @property
    def init_method(self) -> str:
        return f"tcp://{self.coordinator}"


def _int(env: dict, name: str, default: int) -> int:
    value = env.get(name, "")
    return int(value) if value.strip().isdigit() else default


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM node list: 'gpu[003-005,9],cpu1' -> 'gpu003'."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        return "127.0.0.1"
    stem, ranges = match.group(1), match.group(2)
    if not ranges:
        return stem
    return stem + ranges.split(",")[0].split("-")[0]


def detect(environ: dict | None = None) -> DistEnv:
    """The distributed environment of this process; a plain `python run.py` is a world of one."""
    env = dict(os.environ if environ is None else environ)
    if "RANK" in env and "WORLD_SIZE" in env:  # torchrun (also set by our own SLURM wrappers)
        return DistEnv(rank=_int(env, "RANK", 0), local_rank=_int(env, "LOCAL_RANK", 0),
                       world_size=_int(env, "WORLD_SIZE", 1),
                       local_world_size=_int(env, "LOCAL_WORLD_SIZE", _int(env, "WORLD_SIZE", 1)),
                       num_nodes=_int(env, "GROUP_WORLD_SIZE", 1) if "GROUP_WORLD_SIZE" in env else
                       max(1, _int(env, "WORLD_SIZE", 1) // max(1, _int(env, "LOCAL_WORLD_SIZE", 1))),
                       master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                       master_port=_int(env, "MASTER_PORT", DEFAULT_PORT), launcher="torchrun")
    if "SLURM_PROCID" in env and _int(env, "SLURM_NTASKS", 1) > 1:
        world, nodes = _int(env, "SLURM_NTASKS", 1), _int(env, "SLURM_NNODES", 1)
        job_id = _int(env, "SLURM_JOB_ID", 0)
        return DistEnv(rank=_int(env, "SLURM_PROCID", 0), local_rank=_int(env, "SLURM_LOCALID", 0),
                       world_size=world, local_world_size=max(1, world // max(1, nodes)), num_nodes=nodes,
                       master_addr=env.get("MASTER_ADDR") or first_slurm_host(env.get("SLURM_JOB_NODELIST", "")),
                       master_port=_int(env, "MASTER_PORT", DEFAULT_PORT + job_id % 10000), launcher="slurm")
    if "SUBMITIT_LOCAL_GLOBALID" in env and _int(env, "SUBMITIT_LOCAL_NTASKS", 1) > 1:
        world = _int(env, "SUBMITIT_LOCAL_NTASKS", 1)
        return DistEnv(rank=_int(env, "SUBMITIT_LOCAL_GLOBALID", 0),
                       local_rank=_int(env, "SUBMITIT_LOCAL_LOCALID", 0), world_size=world,
                       local_world_size=world, num_nodes=1, master_addr="127.0.0.1",
                       master_port=_int(env, "MASTER_PORT", DEFAULT_PORT), launcher="submitit")
    return DistEnv(0, 0, 1, 1, 1, "127.0.0.1", DEFAULT_PORT, "single")


def process_rank() -> int:
    return detect().rank


def world_size() -> int:
    return detect().world_size
