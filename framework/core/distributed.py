"""Which process of a multi-process job this is, from the launcher's environment (no heavy import).

SLURM (srun) sets SLURM_PROCID, submitit's local executor SUBMITIT_LOCAL_GLOBALID, torchrun RANK.
Every rank runs the whole lifecycle (a multi-host trainer needs all of them); only rank 0 writes
the run records, so ranks never overwrite each other's summary.
"""

from __future__ import annotations

import os

_RANK_VARS = ("SLURM_PROCID", "SUBMITIT_LOCAL_GLOBALID", "RANK")
_WORLD_VARS = ("SLURM_NTASKS", "SUBMITIT_LOCAL_NTASKS", "WORLD_SIZE")


def _first_int(names: tuple[str, ...], default: int) -> int:
    for name in names:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return default


def process_rank() -> int:
    return _first_int(_RANK_VARS, 0)


def world_size() -> int:
    return _first_int(_WORLD_VARS, 1)
