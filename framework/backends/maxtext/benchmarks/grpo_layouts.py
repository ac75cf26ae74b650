"""Issue 14: the GRPO step with the rollout and the update each in its own layout, on 1, 2 and 4 GPUs, with
the preflight's prediction beside each measured step; JSON to --out (rewritten after every layout).

    python -m framework.backends.maxtext.benchmarks.grpo_layouts --out grpo_layouts.json    # Qwen2.5-0.5B shapes
    python -m framework.backends.maxtext.benchmarks.grpo_layouts --tiny --out /tmp/l.json  # CPU check, 4 host devices
    python -m framework.backends.maxtext.benchmarks.grpo_layouts --model qwen3_8b --layouts fsdp4_rollout_auto

--hardware (the preflight's figures) defaults to this machine's file (framework.core.hardware.detect).
Each layout compiles its own programs; to stay within a time limit
run a machine's own layouts, e.g. on 2 GPUs
    --layouts one_device,fsdp2_rollout_same,fsdp2_rollout_dp2,fsdp2_rollout_tp2,tp2_rollout_dp2
and on 4 GPUs
    --layouts one_device,fsdp4_rollout_same,fsdp4_rollout_dp4,fsdp4_rollout_dp2_tp2,fsdp4_rollout_auto
The *_lag1 layouts put the rollout and the update on disjoint devices, one step off-policy and at the same
time (grpo.rollout_lag=1, trainers/pipeline.py); they also record the overlap, the wait for the rollout,
the staleness and the ratio statistics (mean |ratio - 1|, clip fraction) of each timed step.

The work of a step is benchmarks/grpo_step.py's (random weights, random prompts of exactly --prompt-tokens,
EOS disabled so every completion has --new-tokens tokens, random rewards, one update) plus the resharding
of the weights from the update's layout to the rollout's, which the trainer does each step. Layouts that
need more devices than there are are skipped; one that fails (out of memory, say) is recorded with its
error and the others still run. Each layout: --warmup steps, then the median of --steps timed steps;
every step's loss and grad norm are recorded, and the first step's grad norm is compared with one device's.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

from framework.backends.maxtext.benchmarks.grpo_step import OPTIONS, grpo_task, model_config, random_model, run_step
from framework.backends.maxtext.benchmarks.shapes import parse_args, step_report
from framework.core.paths import load_conf

TINY_PROMPTS = 4  # --tiny: enough prompts for 4 rollout replicas
UPDATE = {"dp": 1, "fsdp": 1, "tp": 1, "pp": 1, "ep": 1, "cp": 1}
# name -> (devices, the update's axes, the rollout's axes: None = the update's layout, tp None = the trainer's pick,
#          rollout devices: 0 = the rollout shares the update's devices, synchronous; r > 0 = the first r devices
#          decode, the rest train, one step off-policy at the same time: trainers/pipeline.py)
LAYOUTS = {
    "one_device": (1, {}, None, 0),
    "fsdp2_rollout_same": (2, {"fsdp": 2}, None, 0),  # before issue 14: decoding in the FSDP layout
    "fsdp2_rollout_dp2": (2, {"fsdp": 2}, {"dp": 2, "tp": 1}, 0),
    "fsdp2_rollout_tp2": (2, {"fsdp": 2}, {"dp": 1, "tp": 2}, 0),
    "tp2_rollout_dp2": (2, {"tp": 2}, {"dp": 2, "tp": 1}, 0),
    "fsdp4_rollout_same": (4, {"fsdp": 4}, None, 0),
    "fsdp4_rollout_dp4": (4, {"fsdp": 4}, {"dp": 4, "tp": 1}, 0),
    "fsdp4_rollout_dp2_tp2": (4, {"fsdp": 4}, {"dp": 2, "tp": 2}, 0),
    "fsdp4_rollout_auto": (4, {"fsdp": 4}, {"dp": -1, "tp": None}, 0),
    "rollout1_update1_lag1": (2, {}, {"dp": 1, "tp": 1}, 1),
    "rollout2dp_update2fsdp_lag1": (4, {"fsdp": 2}, {"dp": 2, "tp": 1}, 2),
    "rollout2tp_update2fsdp_lag1": (4, {"fsdp": 2}, {"dp": 1, "tp": 2}, 2),
}  # 3 | 1 splits: 16 prompts do not split over 3 rollout replicas, nor 128 rows over 3 fsdp ranks


def build_layout(args: argparse.Namespace, task, config, devices: list, update_layout, rollout_axes: dict | None,
                 rollout_devices: int = 0):
    """Params and optimizer state on the update's mesh over `devices`, the rollout's placement and sampler
    (rollout_devices > 0: the rollout on the first ones, the update on the rest, behaviour log-probs on)."""
    from flax import linen as nn

    from framework.backends.maxtext.sampler import Sampler
    from framework.backends.maxtext.sharding import (DEFAULT_RULES, build_mesh, rollout_meshes, rollout_parallel,
                                                    tree_bytes)
    from framework.backends.maxtext.trainers.rollout_plan import rollout_tp_for
    from framework.backends.maxtext.trainers.rollout import RolloutPlacement
    from framework.backends.maxtext.trainers.update import PolicyUpdate, build_optimizer, learning_rate_schedule
    from framework.core.parallel import RolloutLayout

    rollout_set, update_set = (devices[:rollout_devices], devices[rollout_devices:]) if rollout_devices else (
        devices, devices)
    mesh = build_mesh(update_layout, update_set)
    model, boxed, shardings, params = random_model(config, mesh)
    weight_bytes = tree_bytes(params)
    if rollout_axes is None:
        layout = update_layout.resolve(len(devices))
    else:
        memory_gb = load_conf("hardware", args.hardware)["hardware"]["memory_gb"]
        axes = {**UPDATE, **rollout_axes, "placement": "separate" if rollout_devices else "shared",
                "devices": rollout_devices or None}
        chosen = RolloutLayout(**axes)
        layout = rollout_parallel(chosen, len(rollout_set), task.prompts_per_step,
                                  lambda free: rollout_tp_for(config, weight_bytes, mesh.shape, task, memory_gb, free,
                                                              rollout_devices > 0,
                                                              rollout_meshes(chosen, len(rollout_set)), DEFAULT_RULES))
    placement = RolloutPlacement(layout, rollout_set, mesh, boxed, DEFAULT_RULES, config.dtype)
    optimizer = build_optimizer(task.optimizer, learning_rate_schedule(task.optimizer, task.steps, 1))
    update = PolicyUpdate(model, task, optimizer, nn.unbox(boxed), shardings, mesh, DEFAULT_RULES)
    opt_state = update.init_opt_state(params)
    # An EOS id the model cannot emit: every completion runs to new_tokens (fixed work per step).
    sampler = Sampler(model, eos_token_ids=[config.vocab_size], pad_token_id=0, prompt_bucket=args.prompt_tokens,
                      mesh=placement.mesh, rules=DEFAULT_RULES, behaviour_log_probs=rollout_devices > 0)
    return mesh, placement, sampler, update, params, opt_state, weight_bytes


def predicted(args: argparse.Namespace, task, config, update_layout, mesh, placement, weight_bytes: float) -> dict:
    """The preflight's prediction of this layout's step (or why there is none)."""
    from framework.backends.maxtext.sharding import DEFAULT_RULES
    from framework.backends.maxtext.trainers.preflight import predict_step
    from framework.backends.maxtext.trainers.rollout_plan import prompt_decision

    try:
        prediction = predict_step(load_conf("model", args.model)["hf_config"],
                                  load_conf("hardware", args.hardware)["hardware"], update_layout, mesh.size, task,
                                  placement.layout, placement.reshard_bytes(config, weight_bytes),
                                  remat=args.remat, rollout_devices=placement.separate_devices,
                                  shared_prompt=prompt_decision(config, task, placement.mesh, DEFAULT_RULES)[0])
    except Exception as error:  # advisory, as in the trainer
        return {"preflight_error": str(error).splitlines()[0]}
    return {key: value for key, value in prediction.items() if key.startswith("preflight_")}


def time_layout(args: argparse.Namespace, name: str, devices: list) -> dict:
    import jax

    from framework.core.parallel import ParallelConfig

    count, update_axes, rollout_axes, rollout_devices = LAYOUTS[name]
    update_layout = ParallelConfig(**{**UPDATE, **update_axes})
    task = grpo_task(args)
    config = model_config(args)
    mesh, placement, sampler, update, params, opt_state, weight_bytes = build_layout(
        args, task, config, devices[:count], update_layout, rollout_axes, rollout_devices)
    if rollout_devices:
        return time_off_policy(args, task, config, update_layout, mesh, placement, sampler, update, params,
                               opt_state, weight_bytes, count)
    timings, losses, grad_norms, rng = [], [], [], jax.random.key(0)
    for step in range(args.warmup + args.steps):
        params, opt_state, timing, metrics = run_step(task, sampler, update, params, opt_state, rng, step, placement)
        losses.append(metrics["loss"])
        grad_norms.append(metrics["grad_norm"])
        if step >= args.warmup:
            timings.append(timing)
    reshard_s, rollout_s, update_s = (statistics.median(t[i] for t in timings) for i in range(3))
    step_s = statistics.median(sum(t) for t in timings)
    result = {"devices": count, "update_mesh": dict(mesh.shape), "rollout_mesh": dict(placement.mesh.shape),
              "reshard_s": reshard_s, "loss": losses, "grad_norm": grad_norms,
              **step_report(args, task.rows_per_step, step_s, rollout_s, update_s, count),
              **predicted(args, task, config, update_layout, mesh, placement, weight_bytes)}
    if "preflight_predicted_step_s" in result:
        result["measured_over_predicted"] = step_s / result["preflight_predicted_step_s"]
    return result


def time_off_policy(args: argparse.Namespace, task, config, update_layout, mesh, placement, sampler, update,
                    params, opt_state, weight_bytes: float, count: int) -> dict:
    """grpo.rollout_lag=1 on disjoint devices (trainers/pipeline.py): batch s is the one run_step draws for
    step s (same prompts, rewards, sampling key), sampled while batch s-1 trains. step_s is the wall time of
    an iteration: max(rollout, update) plus the weight move and whatever does not overlap."""
    import jax
    import numpy as np

    from framework.backends.maxtext.sampler import SamplingParams
    from framework.backends.maxtext.trainers.in_flight import RolloutAhead
    from framework.rl.advantages import compute_advantages

    sampling = SamplingParams(max_new_tokens=task.max_new_tokens, temperature=task.temperature,
                              num_samples=task.num_generations)
    rng, vocab = jax.random.key(0), config.vocab_size

    def sample(policy, step: int):
        data = np.random.default_rng(step)  # run_step's order: prompts, then rewards
        prompts = data.integers(1, vocab, (task.prompts_per_step, task.max_prompt_tokens)).tolist()
        out = jax.device_get(sampler.generate(policy, prompts, jax.random.fold_in(rng, step), sampling))
        return out, data.random(task.rows_per_step).astype(np.float32)

    ahead = RolloutAhead(sample)
    policy, _ = placement.policy(params)
    ahead.submit(policy, 0, 0)
    rows, losses, grad_norms = [], [], []
    try:
        for step in range(args.warmup + args.steps):
            started = time.perf_counter()
            sampled, wait_s = ahead.take()
            ahead.submit(policy, step, step + 1)  # the rollout devices' weights: theta_step
            (out, rewards), update_started = sampled.result, time.perf_counter()
            params, opt_state, metrics = update.run(params, opt_state, None, {
                "input_ids": np.concatenate([out.prompt_ids, out.completion_ids], 1).astype(np.int32),
                "attention_mask": np.concatenate([out.prompt_mask, out.completion_mask], 1).astype(np.int32),
                "completion_mask": np.asarray(out.completion_mask, np.float32),
                "old_log_probs": np.asarray(out.completion_log_probs, np.float32),
                "advantages": compute_advantages(rewards, task.num_generations)})
            jax.block_until_ready(params)
            updated = time.perf_counter()
            policy, reshard_s = placement.policy(params)
            losses.append(metrics["loss"])
            grad_norms.append(metrics["grad_norm"])
            if step >= args.warmup:
                rows.append({"step_s": time.perf_counter() - started, "rollout_s": sampled.rollout_s,
                             "update_s": updated - update_started, "reshard_s": reshard_s, "wait_s": wait_s,
                             "staleness": step - sampled.policy_version,
                             "ratio_abs_deviation": metrics["ratio_abs_deviation"],
                             "clip_fraction": metrics["clip_fraction"]})
    finally:
        ahead.close()
    median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    result = {"devices": count, "update_mesh": dict(mesh.shape), "rollout_mesh": dict(placement.mesh.shape),
              "rollout_lag": 1, "reshard_s": median["reshard_s"], "rollout_wait_s": median["wait_s"],
              "overlap_s": median["rollout_s"] + median["update_s"] + median["reshard_s"] - median["step_s"],
              "staleness": [row["staleness"] for row in rows],
              "ratio_abs_deviation": [row["ratio_abs_deviation"] for row in rows],
              "clip_fraction": [row["clip_fraction"] for row in rows], "loss": losses, "grad_norm": grad_norms,
              **step_report(args, task.rows_per_step, median["step_s"], median["rollout_s"], median["update_s"],
                            mesh.size),
              **predicted(args, task, config, update_layout, mesh, placement, weight_bytes)}
    if "preflight_predicted_step_s" in result:
        result["measured_over_predicted"] = median["step_s"] / result["preflight_predicted_step_s"]
    return result


def with_speedups(results: dict) -> dict:
    """Speed-up over one device and, as a parity check, the first step's grad norm relative to one device's
    (same prompts, rewards and sampling keys in every layout; later steps drift apart as sampled tokens do)."""
    base = results.get("one_device", {})
    for result in results.values():
        if "step_s" in base and "step_s" in result:
            result["speedup_over_one_device"] = base["step_s"] / result["step_s"]
            result["first_grad_norm_relative_difference"] = (
                abs(result["grad_norm"][0] - base["grad_norm"][0]) / max(abs(base["grad_norm"][0]), 1e-12))
    return results


def main(argv: list[str] | None = None) -> dict:
    extra = {"--out": {"type": Path, "default": Path("grpo_layouts.json"), "help": "the JSON report"},
             "--layouts": {"default": ",".join(LAYOUTS), "help": f"comma-separated, of {', '.join(LAYOUTS)}"},
             **OPTIONS}
    args = parse_args(__doc__.splitlines()[0], argv, extra)
    given = argv if argv is not None else sys.argv
    if args.tiny and "--prompts" not in given:
        args.prompts = TINY_PROMPTS
    if not args.tiny and "--hardware" not in given:  # this machine's file (h200 on an H200): the preflight's figures
        from framework.core.hardware import detect

        args.hardware = detect().option
    names = [name for name in args.layouts.split(",") if name]
    unknown = [name for name in names if name not in LAYOUTS]
    if unknown:
        raise SystemExit(f"--layouts: unknown {', '.join(unknown)}; valid: {', '.join(LAYOUTS)}")
    import jax

    if args.tiny:  # the host as 4 devices, before JAX starts its backends
        jax.config.update("jax_num_cpu_devices", max(LAYOUTS[name][0] for name in names))
    devices = jax.devices()
    report = {"benchmark": "grpo_layouts", "jax": jax.__version__, "device": devices[0].device_kind,
              "hardware": args.hardware, "remat": args.remat,
              "devices": len(devices), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "layouts": {}}
    for name in names:
        if LAYOUTS[name][0] > len(devices):
            report["layouts"][name] = {"skipped": f"needs {LAYOUTS[name][0]} devices, {len(devices)} here"}
        else:
            try:
                report["layouts"][name] = time_layout(args, name, devices)
            except Exception as error:  # one layout's failure (out of memory, a bad mesh) keeps the others
                report["layouts"][name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:500]}",
                                           "traceback": traceback.format_exc()[-2000:]}
            jax.clear_caches()
            gc.collect()
        with_speedups(report["layouts"])
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps({name: report["layouts"][name]}), flush=True)
    return report


if __name__ == "__main__":
    main()
