"""The GRPO preflight refuses a layout the simulator predicts will not fit, before anything compiles (issue 11)."""

from __future__ import annotations

import pytest

from framework.backends.maxtext.trainers.preflight import refuse_out_of_memory
from framework.core.build import build
from framework.core.errors import ConfigError
from framework.tasks.grpo import GRPOTask
from tests.conftest import compose_config


def test_a_predicted_out_of_memory_names_what_to_lower():
    cfg = compose_config(["recipe=grpo_arithmetic_cpu", "grpo.max_prompt_tokens=2000"])
    task = build(GRPOTask, cfg.grpo, "grpo")
    hardware = {"name": "cpu", "memory_gb": 24}
    refuse_out_of_memory({"preflight_fits": True, "preflight_memory_per_device_gb": 3.0}, hardware, task)
    with pytest.raises(ConfigError, match=r"grpo: the preflight predicts 59 GB per device and hardware=cpu holds 24 GB; "
                                          r"lower grpo.max_prompt_tokens \(2000\)"):
        refuse_out_of_memory({"preflight_fits": False, "preflight_memory_per_device_gb": 59.0}, hardware, task)
