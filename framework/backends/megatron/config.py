"""What the megatron adapter hands its pretrain trainer (built from the composed config)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from framework.core.parallel import ParallelConfig
from framework.data.records import RecordSpec
from framework.tasks.pretrain import PretrainTask


@dataclass
class MegatronPretrainConfig:
    task: PretrainTask
    data: RecordSpec
    model_name: str
    model: dict  # the model group
    model_dir: Optional[str]  # a local HF directory (config.json, tokenizer, weights); None: built from `model`
    hf_config: dict  # its config.json (the model group's hf_config until a random-init directory is built)
    hardware: dict  # the hardware group (accelerator, peak rates: MFU and preflight)
    parallel: ParallelConfig  # unresolved: -1 takes the ranks of the launched world
    layer_spec: str  # local | te
    cache_dir: str  # tokenised data under <cache_dir>/megatron_data
    preflight: bool  # the simulator's step prediction in summary.json
    seed: int
