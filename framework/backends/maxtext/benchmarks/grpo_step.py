"""Time one GRPO step of the maxtext backend and print JSON: rollout tokens/s, step time, update MFU.

    python -m framework.backends.maxtext.benchmarks.grpo_step                 # Qwen2.5-0.5B shapes, GPU
    python -m framework.backends.maxtext.benchmarks.grpo_step --tiny          # tiny model, CPU check

The model has the architecture of `--model` (a conf/model file) with random weights; prompts are
random token ids of exactly --prompt-tokens and EOS is disabled, so every completion has exactly
--new-tokens tokens and every step does the same work. A step is what GRPOTrainer runs: sampling
(num_generations per prompt, one prefill per prompt), host rewards (random here: the text is not
decoded), group advantages, and the micro-batched update (ppo_epochs=1, beta=0: no extra forward).

`--remat`, `--attention` and `--decode-attention` choose the backend's remat policy and attention
kernels (as conf/backend/maxtext.yaml); `setup_s` (imports, parameter init) and `first_step_done_s` are wall
seconds from the start of main, `compile_s_per_step` what JAX spent compiling in each step.

Update MFU = model FLOPs of the update (benchmarks/flops.py) / (update seconds x peak of
--hardware at --dtype).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from framework.backends.maxtext.config import REMAT_NAMES
from framework.backends.maxtext.benchmarks.shapes import parse_args, step_report
from framework.core.paths import REPO_ROOT, load_conf
from framework.core.parallel import ParallelConfig

def grpo_task(args: argparse.Namespace):
    """The task of conf/task/grpo.yaml with the benchmark's shapes."""
    from omegaconf import OmegaConf

    from framework.core.build import build
    from framework.tasks.grpo import GRPOTask

    values = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf" / "task" / "grpo.yaml").grpo)
    values |= {"prompts_per_step": args.prompts, "num_generations": args.generations, "max_prompt_tokens":
               args.prompt_tokens, "max_new_tokens": args.new_tokens, "micro_batch_size": args.micro_batch,
               "ppo_epochs": 1, "beta": 0.0, "param_dtype": "float32", "compute_dtype": args.dtype}
    return build(GRPOTask, values, "grpo")


def model_config(args: argparse.Namespace):
    """The --model architecture with float32 master weights, --dtype compute, --remat and the kernels."""
    from framework.backends.maxtext.models import ModelConfig, kernel_platform

    return ModelConfig.from_hf_config(load_conf("model", args.model)["hf_config"], param_dtype="float32",
                                      dtype=args.dtype).for_platform(args.remat, args.attention, args.decode_attention,
                                                                     kernel_platform())


def random_model(config, mesh):
    """(model on the mesh, its boxed abstract params, their shardings, random params placed by them)."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from framework.backends.maxtext.models import Transformer, abstract_params
    from framework.backends.maxtext.sharding import DEFAULT_RULES, param_shardings

    model = Transformer(config, mesh, DEFAULT_RULES)
    boxed = abstract_params(Transformer(config))
    shardings = param_shardings(boxed, mesh, DEFAULT_RULES)
    ids = jnp.zeros((1, 1), jnp.int32)
    init = jax.jit(lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, jnp.ones((1, 1), bool))["params"]),
                   out_shardings=shardings)
    return model, boxed, shardings, init()


def build_components(args: argparse.Namespace):
    from flax import linen as nn

    from framework.backends.maxtext.sampler import Sampler
    from framework.backends.maxtext.sharding import DEFAULT_RULES, build_mesh
    from framework.backends.maxtext.trainers.update import PolicyUpdate, build_optimizer, learning_rate_schedule

    task = grpo_task(args)
    config = model_config(args)
    mesh = build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1))
    model, boxed, shardings, params = random_model(config, mesh)
    optimizer = build_optimizer(task.optimizer, learning_rate_schedule(task.optimizer, task.steps, 1))
    update = PolicyUpdate(model, task, optimizer, nn.unbox(boxed), shardings, mesh, DEFAULT_RULES)
    opt_state = update.init_opt_state(params)
    # An EOS id the model cannot emit: every completion runs to new_tokens (fixed work per step).
    sampler = Sampler(model, eos_token_ids=[config.vocab_size], pad_token_id=0, prompt_bucket=args.prompt_tokens)
    return task, config, params, opt_state, sampler, update


def run_step(task, sampler, update, params, opt_state, rng, step: int, placement=None):
    """One GRPO step as the trainer runs it; returns new params/state, (reshard s, rollout s, update s) and
    the update's metrics (loss, grad_norm, ...).
    `placement` (trainers/rollout.RolloutPlacement): the rollout's own layout, the weights resharded to it."""
    import jax
    import numpy as np

    from framework.rl.advantages import compute_advantages
    from framework.backends.maxtext.sampler import SamplingParams

    data = np.random.default_rng(step)
    vocab = sampler.model.config.vocab_size
    prompts = data.integers(1, vocab, (task.prompts_per_step, task.max_prompt_tokens)).tolist()
    sampling = SamplingParams(max_new_tokens=task.max_new_tokens, temperature=task.temperature,
                              num_samples=task.num_generations)
    policy, reshard_s = placement.policy(params) if placement is not None else (params, 0.0)
    start = time.perf_counter()
    out = jax.device_get(sampler.generate(policy, prompts, jax.random.fold_in(rng, step), sampling))
    del policy
    rolled_out = time.perf_counter()
    rewards = data.random(task.rows_per_step).astype(np.float32)
    arrays = {"input_ids": np.concatenate([out.prompt_ids, out.completion_ids], 1).astype(np.int32),
              "attention_mask": np.concatenate([out.prompt_mask, out.completion_mask], 1).astype(np.int32),
              "completion_mask": np.asarray(out.completion_mask, np.float32),
              "advantages": compute_advantages(rewards, task.num_generations)}
    params, opt_state, metrics = update.run(params, opt_state, None, arrays)
    jax.block_until_ready(params)
    return params, opt_state, (reshard_s, rolled_out - start, time.perf_counter() - rolled_out), metrics


OPTIONS = {"--remat": {"default": "none", "choices": list(REMAT_NAMES), "help": "remat policy"},
           "--attention": {"default": "auto", "choices": ["auto", "xla", "cudnn"], "help": "attention kernel"},
           "--decode-attention": {"default": "auto", "choices": ["auto", "xla", "pallas"],
                                  "help": "decode-step attention kernel"}}


def main(argv: list[str] | None = None) -> dict:
    started = time.perf_counter()
    args = parse_args(__doc__.splitlines()[0], argv, OPTIONS)
    import jax

    from framework.backends.maxtext.compile_clock import CompileClock

    clock = CompileClock()
    task, config, params, opt_state, sampler, update = build_components(args)
    jax.block_until_ready((params, opt_state))
    built = time.perf_counter()
    rng = jax.random.key(0)
    timings, compile_s = [], []
    for step in range(args.warmup + args.steps):
        params, opt_state, timing, _ = run_step(task, sampler, update, params, opt_state, rng, step)
        compile_s.append(clock.take())
        if step == 0:
            first_step_done = time.perf_counter()
        if step >= args.warmup:
            timings.append(timing)
    rollout_s = statistics.median(t[1] for t in timings)
    update_s = statistics.median(t[2] for t in timings)
    step_s = statistics.median(t[1] + t[2] for t in timings)
    result = {"framework": "crucible-maxtext (jax)", "jax": jax.__version__, "device": jax.devices()[0].device_kind,
              "devices": jax.device_count(), "remat": config.remat, "attention": config.attention_kernel,
              "decode_attention": config.decode_kernel,
              "setup_s": built - started, "first_step_done_s": first_step_done - started,
              "compile_s_per_step": compile_s,
              **step_report(args, task.rows_per_step, step_s, rollout_s, update_s)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
