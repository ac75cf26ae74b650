"""The typed config a torch trainer gets from TorchAdapter.convert_config (types only, values from YAML)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from framework.core.parallel import ParallelConfig
from framework.data.records import RecordSpec
from framework.tasks.dpo import DPOTask
from framework.tasks.sft import SFTTask


@dataclass
class TorchConfig:
    task_name: str  # sft | dpo
    task: Union[SFTTask, DPOTask]
    data: RecordSpec
    model_name: str
    model_source: str  # a local HF directory or a hub id
    device: str  # cpu | cuda
    attn_implementation: str  # sdpa | eager (patches may change it)
    parallel: ParallelConfig  # the layout as configured (-1 = the remaining devices)
    data_parallel: int  # ranks that see different data: dp x fsdp resolved over the world size
    gradient_accumulation_steps: int  # global batch / (micro batch x data-parallel ranks)
    peak_tflops: Optional[float]  # of one device at compute_dtype, for MFU; None = unknown
    dataloader_num_workers: int
    seed: int
