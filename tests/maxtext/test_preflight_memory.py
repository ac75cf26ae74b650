"""The GRPO preflight refuses a layout the simulator predicts will not fit, before anything compiles (issue 11)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from framework.backends.maxtext.trainers.preflight import refuse_out_of_memory
from framework.core.build import build
from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig
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


def _qwen_05b_task(**overrides):
    cfg = compose_config(["recipe=grpo_gsm8k", "data=gsm8k_sample", *[f"grpo.{k}={v}" for k, v in overrides.items()]])
    return build(GRPOTask, cfg.grpo, "grpo"), dict(cfg.model.hf_config), dict(cfg.hardware)


def _memory_of(task, hf, hardware, size, remat="none") -> float:
    from dataclasses import replace

    from framework.backends.maxtext.trainers.preflight import predict_step
    from framework.core.parallel import ParallelConfig

    one = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    return predict_step(hf, hardware, one, 1, replace(task, micro_batch_size=size),
                        remat=remat)["preflight_memory_per_device_gb"]


def test_auto_micro_batch_is_the_largest_that_the_preflight_fits():
    """micro_batch_size=auto: the largest divisor of the 128 rows whose predicted memory fits 85% of the
    device; a smaller device gets a smaller micro-batch, and remat (minimal, full) a larger one."""
    from framework.backends.maxtext.trainers.preflight import MEMORY_HEADROOM, pick_update_plan
    from framework.core.parallel import ParallelConfig

    task, hf, hardware = _qwen_05b_task(micro_batch_size="auto")
    one = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    assert task.micro_batch_size == "auto" and task.rows_per_step == 128
    # a device that holds the micro-batch of 32 but not 64 (both predicted, not assumed)
    between = (_memory_of(task, hf, hardware, 32) + _memory_of(task, hf, hardware, 64)) / 2 / MEMORY_HEADROOM
    small = {**hardware, "memory_gb": between}
    assert pick_update_plan(hf, small, one, 1, task, "none") == (32, "none")
    assert pick_update_plan(hf, {**hardware, "memory_gb": 10_000}, one, 1, task, "none") == (128, "none")
    minimal, full = (pick_update_plan(hf, small, one, 1, task, policy)[0] for policy in ("minimal", "full"))
    assert 32 <= minimal <= full and full > 32  # the matmul outputs, then layer inputs only: more rows fit
    tiny = {**hardware, "memory_gb": 0.001}
    assert pick_update_plan(hf, tiny, one, 1, task, "none") == (1, "none")  # the preflight then refuses the run


def test_auto_micro_batch_keeps_whole_rows_per_replica():
    from framework.backends.maxtext.trainers.preflight import pick_update_plan
    from framework.core.parallel import ParallelConfig

    task, hf, hardware = _qwen_05b_task(micro_batch_size="auto", prompts_per_step=3, num_generations=2)
    hardware["devices_per_node"] = 2
    four = ParallelConfig(dp=1, fsdp=2, tp=1, pp=1, ep=1, cp=1)
    assert pick_update_plan(hf, {**hardware, "memory_gb": 10_000}, four, 2, task, "none") == (6, "none")
    assert pick_update_plan(hf, {**hardware, "memory_gb": 0.001}, four, 2, task, "none") == (2, "none")


def test_auto_micro_batch_without_a_simulator_model_is_a_config_error():
    from framework.backends.maxtext.trainers.preflight import pick_update_plan
    from framework.core.parallel import ParallelConfig

    task, hf, hardware = _qwen_05b_task(micro_batch_size="auto")
    two = ParallelConfig(dp=1, fsdp=2, tp=1, pp=1, ep=1, cp=1)  # on a one-GPU hardware file
    with pytest.raises(ConfigError, match="grpo.micro_batch_size / backend.adapter.remat: auto needs the "
                                          "simulator's memory estimate"):
        pick_update_plan(hf, hardware, two, 2, task, "none")


def test_auto_remat_is_the_fastest_policy_that_fits_the_largest_micro_batch():
    """remat=auto: the largest micro-batch that fits under some policy, then the first of none, minimal, full
    that fits it. The recipe's 80 GB H100: 128 rows with minimal (the fastest update measured there,
    docs/benchmarks.md); a larger device keeps everything; a set micro-batch gets the fastest that fits it."""
    from dataclasses import replace

    from framework.backends.maxtext.config import REMAT_NAMES
    from framework.backends.maxtext.trainers.preflight import MEMORY_HEADROOM, pick_update_plan
    from framework.core.parallel import ParallelConfig

    task, hf, hardware = _qwen_05b_task(micro_batch_size="auto")
    one = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    assert (hardware["name"], hardware["memory_gb"]) == ("h100", 80)
    assert pick_update_plan(hf, hardware, one, 1, task, "auto") == (128, "minimal")
    assert pick_update_plan(hf, {**hardware, "memory_gb": 10_000}, one, 1, task, "auto") == (128, "none")
    memory = {policy: _memory_of(task, hf, hardware, 128, policy) for policy in REMAT_NAMES}
    assert memory["none"] > memory["minimal"] > memory["full"]
    between = {**hardware, "memory_gb": (memory["minimal"] + memory["full"]) / 2 / MEMORY_HEADROOM}
    assert pick_update_plan(hf, between, one, 1, task, "auto") == (128, "full")
    assert pick_update_plan(hf, hardware, one, 1, replace(task, micro_batch_size=32), "auto") == (32, "none")


def test_auto_micro_batch_and_remat_run_and_are_recorded(tmp_path):
    """Through the trainer: the picks are logged, the run trains, the summary says what ran (the CPU file's
    24 GB fit every micro-batch of the tiny model without remat, so the whole step of 16 rows)."""
    import json

    from tests.conftest import run_cli

    proc = run_cli(["recipe=grpo_gsm8k_cpu", "grpo.micro_batch_size=auto", "backend.adapter.remat=auto",
                    "grpo.steps=1", "grpo.eval.every=0", "grpo.checkpoint.every=0", "grpo.export_hf=false",
                    "progress=false", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grpo: micro_batch_size auto -> 16 (the preflight's memory estimate)" in proc.stderr
    assert "grpo: remat auto -> none (the preflight's memory estimate at micro-batch 16)" in proc.stderr
    metrics = json.loads((tmp_path / "summary.json").read_text())["result"]["metrics"]
    assert (metrics["micro_batch_size"], metrics["remat"]) == (16, "none")
    # the sampler's shared-prefix decision, logged and recorded (rollout_plan.prompt_sharing)
    assert f"shared prefix: off ({metrics['shared_prefix_reason']})" in proc.stderr
    assert metrics["shared_prefix"] is False and metrics["shared_prefix_reason"]


def test_the_update_is_one_optimizer_step_per_epoch_over_accumulated_micro_batches():
    """The preflight simulates the update as it runs: the step's rows in micro-batches whose gradients
    accumulate, then one AdamW step per ppo epoch (not one step per micro-batch)."""
    from sims.api import simulate

    from framework.backends.maxtext.trainers.preflight import grpo_phases

    task, hf, hardware = _qwen_05b_task(micro_batch_size=16, ppo_epochs=2)
    (workload, repeats), = [(w, n) for name, w, n in grpo_phases(task, zero=False) if name == "train"]
    assert (workload["batch"], workload["microbatches"], repeats) == (128, 8, 2)
    rows = simulate(hf, hardware, {"dp": 1}, workload, stack="xla").rows
    counts = {row["name"]: row["count"] for row in rows if row["name"] in ("optimizer_step", "grad_accumulate")}
    assert counts == {"optimizer_step": 1, "grad_accumulate": 8}


def test_the_preflights_decode_holds_a_shared_prompt_once_per_group():
    """Where the sampler shares the prompt (rollout_plan.prompt_decision: prefix_cache.prefix_decision at the step's shapes
    over the rollout mesh's prompt shards),
    the preflight's decode phase is the simulator's shared-prefix decode (the prompt held once per group, a kernel
    call over it and one over each row's tokens), so a long-prompt run it fits is not refused; at the recipe's
    shapes nothing changes."""
    from dataclasses import replace

    from framework.backends.maxtext.sharding import DEFAULT_RULES, abstract_mesh
    from framework.backends.maxtext.trainers.preflight import grpo_phases, predict_step
    from framework.backends.maxtext.trainers.rollout_plan import prompt_decision
    from framework.core.paths import load_conf
    from tests.maxtext.test_rollout_layouts import grpo_task

    task = replace(grpo_task("grpo.max_prompt_tokens=2048", "grpo.max_new_tokens=256", "grpo.prompts_per_step=16",
                             "grpo.num_generations=8"), micro_batch_size=16)
    auto = SimpleNamespace(decode_kernel="pallas", shared_prefix="auto")

    def shares_prompt(task, data: int) -> bool:  # 16 prompts x 8 over `data` replicas (32: a group split)
        return prompt_decision(auto, task, abstract_mesh({"data": data, "fsdp": 1, "expert": 1, "tensor": 1}),
                               DEFAULT_RULES)[0]

    assert shares_prompt(task, 1) and not shares_prompt(task, 2) and not shares_prompt(task, 32)
    decode = {shared: dict((name, workload) for name, workload, _ in grpo_phases(task, False, shared_prompt=shared))[
        "decode"] for shared in (False, True)}
    # the cascade the sampler runs (sims/shared_prefix.py), not a shortened context
    assert decode[False]["context_len"] == decode[True]["context_len"] == 2048 + 128
    assert "shared_prefix" not in decode[False]
    assert (decode[True]["shared_prefix"], decode[True]["seq_len"]) == (8, 2048)
    hf, hardware = load_conf("model", "qwen2_5_0_5b_instruct")["hf_config"], load_conf("hardware", "h100")["hardware"]
    repeated, shared = (predict_step(hf, hardware, ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1), 1, task,
                                     shared_prompt=flag) for flag in (False, True))
    assert shared["preflight_decode_s"] < repeated["preflight_decode_s"]
    from sims.api import simulate

    memory = {flag: simulate(hf, hardware, {"tp": 1}, workload, stack="xla").memory_per_device_gb
              for flag, workload in decode.items()}
    assert memory[True] < memory[False] - 1.0  # 16 x 2,048 + 128 x 128 cached tokens, not 128 x 2,176: 2.8 GB
    assert not shares_prompt(replace(task, max_prompt_tokens=256), 1)  # the GSM8K recipe's 256 + 256
    one_token = predict_step(hf, hardware, ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1), 1,
                             replace(task, max_new_tokens=1), shared_prompt=True)  # a suffix of one token, not none
    assert one_token["preflight_decode_s"] > 0


def test_the_log_prob_passes_are_scanned_and_the_rollouts_prefill_is_not():
    """The extra forward passes (old log-probs when ppo_epochs > 1, the reference's when beta > 0) run the layers as
    an nn.scan over the stacked weights, which slices every layer's weights out each pass (sims/scan_forward.py);
    the sampler's prefill runs them unrolled over its KV cache."""
    from framework.backends.maxtext.trainers.preflight import grpo_phases

    task, hf, hardware = _qwen_05b_task(micro_batch_size=16, ppo_epochs=2)
    phases = {name: (workload, repeats) for name, workload, repeats in grpo_phases(task, zero=False)}
    (forward, repeats), (prefill, _) = phases["forward"], phases["prefill"]
    assert forward["scanned"] is True and repeats == 128 // 16 and not prefill.get("scanned")
    from sims.api import simulate

    rows = simulate(hf, hardware, {"dp": 1}, forward, stack="xla").rows
    assert [row["count"] for row in rows if row["name"] == "scan_weight_slices"] == [24]


def test_the_log_prob_passes_cast_the_master_weights_and_the_rollout_does_not():
    """The log-prob passes run on the update's grpo.param_dtype weights and cast them to the compute dtype as they use
    them (the scan's slices, the head per chunk: sims/scan_forward.py); the sampler casts its copy once before its
    prefill and decode, which run on compute-dtype weights."""
    from framework.backends.maxtext.trainers.preflight import grpo_phases

    task, _, _ = _qwen_05b_task(micro_batch_size=16, beta=0.04)
    phases = {name: workload for name, workload, _ in grpo_phases(task, zero=False)}
    assert task.param_dtype == "float32" and phases["forward"]["param_dtype"] == "fp32"
    assert phases["forward"]["dtype"] == "bf16" and "param_dtype" not in phases["prefill"]
    assert "param_dtype" not in phases["decode"] and "param_dtype" not in phases["train"]
    bf16_master, _, _ = _qwen_05b_task(micro_batch_size=16, beta=0.04, param_dtype="bfloat16")
    assert dict(grpo_phases(bf16_master, zero=False)[-1][1])["param_dtype"] == "bf16"  # read from grpo.param_dtype


def test_off_policy_the_old_log_probs_are_the_samplers_not_a_pass():
    """With grpo.rollout_lag >= 1 the sampler returns the behaviour log-probs and the update takes them as the old
    ones (trainers/update.py): ppo_epochs > 1 runs no old-log-prob pass; the reference's (beta > 0) still runs."""
    from dataclasses import replace

    from framework.backends.maxtext.trainers.preflight import grpo_phases

    task, _, _ = _qwen_05b_task(micro_batch_size=16, ppo_epochs=2)
    repeats = {lag: {name: n for name, _, n in grpo_phases(replace(task, rollout_lag=lag), zero=False)}
               for lag in (0, 1)}
    assert repeats[0]["forward"] == 128 // 16 and "forward" not in repeats[1]
    with_reference = {name: n for name, _, n in grpo_phases(replace(task, rollout_lag=1, beta=0.04), zero=False)}
    assert with_reference["forward"] == 128 // 16
