"""Preflight: the simulator's prediction (sims.api.simulate) of one pretraining step of this very layout.

The step is one `train` workload of megatron's kernels (the simulator's `megatron_local` stack): the
global batch at the task's sequence length, split into the run's micro-batches over tp x dp x pp
(ZeRO when the distributed optimizer shards the optimizer state). The prediction lands in summary.json beside the measured step time (measured_step_s).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from framework.core.dtypes import SHORT
from framework.core.errors import CrucibleError

log = logging.getLogger(__name__)


def predict_step(hf_config: Mapping[str, Any], hardware: Mapping[str, Any], layout, task,
                 num_microbatches: int) -> dict[str, Any]:
    """{preflight_predicted_step_s, preflight_memory_per_device_gb, preflight_fits} or {} / an error entry."""
    try:
        from sims.api import simulate
        from sims.stacks import stack_for_backend
    except ImportError:
        log.warning("preflight: the simulator (sims) is not importable; no prediction")
        return {}
    workload = {"mode": "train", "batch": task.global_batch_size, "seq_len": task.seq_length,
                "microbatches": num_microbatches, "dtype": SHORT[task.compute_dtype],
                "zero": layout.shard_optimizer}
    try:
        summary = simulate(hf_config, hardware, {"tp": layout.tp, "dp": layout.dp, "pp": layout.pp, "ep": 1},
                           workload, stack=stack_for_backend("megatron")).summary()
    except CrucibleError as error:  # advisory: a model the simulator cannot handle still trains
        log.warning("preflight: %s", error)
        return {"preflight_error": str(error)}
    if summary["status"] != "ok":
        log.warning("preflight: the simulator cannot model this run: %s", summary["reason"])
        return {"preflight_error": summary["reason"]}
    prediction = {"preflight_predicted_step_s": summary["latency_s"],
                  "preflight_memory_per_device_gb": summary["memory_per_device_gb"],
                  "preflight_fits": bool(summary["fits"]), "preflight_mfu": summary.get("mfu")}
    log.info("preflight: predicted %.3g s per step, %.3g GB per device (fits: %s)",
             prediction["preflight_predicted_step_s"], prediction["preflight_memory_per_device_gb"],
             prediction["preflight_fits"])
    return prediction
