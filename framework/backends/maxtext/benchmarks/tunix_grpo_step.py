"""Time google-tunix's GRPOLearner (JAX, flax nnx, vanilla sampler) on the shapes of grpo_step.py; print JSON.

    PYTHONPATH=/tmp/tunix_site:. python -m framework.backends.maxtext.benchmarks.tunix_grpo_step          # GPU
    PYTHONPATH=/tmp/tunix_site:. python -m framework.backends.maxtext.benchmarks.tunix_grpo_step --tiny   # CPU check

tunix is not a project dependency. Its import path needs, beyond jax/flax/optax/orbax/transformers, only
google-metrax 0.2.4, clu 0.0.12, tensorboardX 2.6.5, perfetto 0.59.1 and jaxtyping 0.3.11 (+ wadler-lindig;
both already on the GPU image); all pure-python wheels, installed into a side folder, never the system:
    pip install --no-deps --target /tmp/tunix_site google_tunix-0.1.7-py3-none-any.whl <those wheels>

The same work as grpo_step.py and trl_grpo_step.py: tunix's own Qwen2 (tunix.models.qwen2) with a
ModelConfig of --model's architecture, random weights (tunix.models.dummy_model_creator), float32
master weights and --dtype compute; one RLCluster with actor and rollout on one mesh (shared weights,
no weight sync), the "vanilla" rollout (tunix.generate.Sampler); GRPOConfig num_generations, beta 0,
num_iterations 1, loss_agg_mode "token-mean"; mini_batch_size = --prompts (one optimizer step per GRPO
step), train_micro_batch_size = --micro-batch / --generations prompts (gradients accumulate over the
batch with optax.MultiSteps), rollout_micro_batch_size = --prompts (one generate call of all rows);
optax.adamw at learning rate 1e-6, as trl_grpo_step.py.

Prompts: "7" repeated --prompt-tokens times (one token per digit, checked), the tokenizer of the
random-init HF directory that trl_grpo_step.py uses. tunix's sampler has no min_new_tokens: its only
stop is the EOS list, so RolloutConfig.eos_tokens is [vocab_size], an id the model cannot emit, and
every completion has exactly --new-tokens tokens (checked on every rollout). tunix samples each of
the prompts x generations rows separately (the prompt is repeated, prefill included), and its
Qwen2 prefill returns float32 logits for every prompt position (only the last one is sampled from).

Timings: step = time between the ends of consecutive GRPO steps (RLLearner._run_global_step, then a
block on the actor's parameters); rollout = time inside RLCluster.generate (sampling, detokenising);
update = step - rollout (rewards, advantages, micro-batched loss and backward, optimizer, bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

from framework.backends.maxtext.benchmarks.shapes import parse_args, step_report
from framework.backends.maxtext.benchmarks.trl_grpo_step import PROMPT_TOKEN, random_init_dir
from framework.core.paths import REPO_ROOT, load_conf


def tunix_model_config(hf_config: dict, dtype: str):
    """tunix's Qwen2 ModelConfig of an HF qwen2 config: float32 parameters, `dtype` compute."""
    import jax.numpy as jnp
    from tunix.models.qwen2 import model as qwen2

    heads = hf_config["num_attention_heads"]
    return qwen2.ModelConfig(
        num_layers=hf_config["num_hidden_layers"], vocab_size=hf_config["vocab_size"],
        embed_dim=hf_config["hidden_size"], hidden_dim=hf_config["intermediate_size"], num_heads=heads,
        head_dim=hf_config.get("head_dim", hf_config["hidden_size"] // heads),
        num_kv_heads=hf_config["num_key_value_heads"], rope_theta=int(hf_config["rope_theta"]),
        norm_eps=hf_config["rms_norm_eps"], use_tied_embedding=hf_config.get("tie_word_embeddings", False),
        dtype=jnp.dtype(dtype), param_dtype=jnp.float32)


def build_mesh():
    """All devices on tunix's "fsdp" axis ("tp" 1): one device on the benchmark's single GPU."""
    import jax
    import numpy as np

    return jax.sharding.Mesh(np.array(jax.devices()).reshape(-1, 1), ("fsdp", "tp"))


def check_prompt(tokenizer, args: argparse.Namespace) -> str:
    """The prompt, after checking that tunix's sampler tokenises it (BOS included) to --prompt-tokens ids."""
    from tunix.generate.tokenizer_adapter import TokenizerAdapter

    adapter = TokenizerAdapter(tokenizer)
    prompt = PROMPT_TOKEN * args.prompt_tokens
    ids = ([adapter.bos_id()] if adapter.bos_id() else []) + adapter.encode(prompt)
    if len(ids) != args.prompt_tokens or adapter.pad_id() in ids:
        raise RuntimeError(f"the benchmark prompt is {len(ids)} tokens (pad id inside: "
                           f"{adapter.pad_id() in ids}), not {args.prompt_tokens}")
    return prompt


def build_cluster(args: argparse.Namespace, tokenizer, config, mesh):
    import optax
    from tunix.models.dummy_model_creator import create_dummy_model
    from tunix.models.qwen2 import model as qwen2
    from tunix.rl import rl_cluster
    from tunix.rl.rollout import base_rollout

    if args.micro_batch % args.generations or args.prompts % (args.micro_batch // args.generations):
        raise SystemExit(f"--micro-batch {args.micro_batch} must be a multiple of --generations "
                         f"{args.generations} that divides the {args.prompts * args.generations} rows")
    actor = create_dummy_model(qwen2.Qwen2, config, mesh)
    roles = (rl_cluster.Role.ACTOR, rl_cluster.Role.ROLLOUT, rl_cluster.Role.REFERENCE)
    training = rl_cluster.RLTrainingConfig(
        actor_optimizer=optax.adamw(1e-6), eval_every_n_steps=10**9, max_steps=args.warmup + args.steps,
        mini_batch_size=args.prompts, train_micro_batch_size=args.micro_batch // args.generations,
        rollout_micro_batch_size=args.prompts, compute_logps_micro_batch_size=args.prompts,
        pbar_description=None)
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=args.new_tokens, max_prompt_length=args.prompt_tokens,
        kv_cache_size=args.prompt_tokens + args.new_tokens, temperature=1.0, top_p=1.0, top_k=None,
        # An id the model cannot emit: every completion runs to new_tokens (fixed work per step).
        eos_tokens=[config.vocab_size])
    cluster_config = rl_cluster.ClusterConfig(
        role_to_mesh={role: mesh for role in roles}, rollout_engine="vanilla", offload_to_cpu=False,
        training_config=training, rollout_config=rollout)
    return rl_cluster.RLCluster(actor=actor, tokenizer=tokenizer, cluster_config=cluster_config)


class Timings:
    """Ends of GRPO steps (a GRPOLearner subclass) and the time spent in RLCluster.generate."""

    def __init__(self, new_tokens: int):
        self.new_tokens, self.step_ends, self.generate_s = new_tokens, [], []

    def wrap_generate(self, cluster) -> None:
        generate = cluster.generate

        def timed_generate(*args, **kwargs):
            start = time.perf_counter()
            out = generate(*args, **kwargs)  # tokens come back as host numpy arrays: already synchronised
            self.generate_s.append(time.perf_counter() - start)
            lengths = {len(tokens) for tokens in out.tokens}
            if lengths != {self.new_tokens}:
                raise RuntimeError(f"completion lengths {sorted(lengths)}, not all {self.new_tokens}")
            return out

        cluster.generate = timed_generate

    def learner_class(self):
        import jax
        from flax import nnx
        from tunix.rl.grpo.grpo_learner import GRPOLearner

        timings = self

        class TimedGRPOLearner(GRPOLearner):
            def _run_global_step(self, *args, **kwargs):
                super()._run_global_step(*args, **kwargs)
                jax.block_until_ready(nnx.state(self.rl_cluster.actor_trainer.model))
                timings.step_ends.append(time.perf_counter())

        return TimedGRPOLearner


def random_reward(prompts, completions, **kwargs) -> list[float]:
    return [random.random() for _ in completions]


def main(argv: list[str] | None = None) -> dict:
    cache = Path(os.environ.get("CRUCIBLE_CACHE", REPO_ROOT / "outputs" / "cache")) / "models"
    args = parse_args(__doc__.splitlines()[0], argv, extra={"--cache-dir": {
        "default": str(cache), "help": "where the random-init model directory (its tokenizer) is built"}})
    import jax
    import numpy as np
    import tunix
    from transformers import AutoTokenizer
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    random.seed(0)
    tokenizer = AutoTokenizer.from_pretrained(random_init_dir(args))
    prompt = check_prompt(tokenizer, args)
    config = tunix_model_config(load_conf("model", args.model)["hf_config"], args.dtype)
    mesh = build_mesh()
    timings = Timings(args.new_tokens)
    with mesh:  # the legacy mesh context: tunix's Qwen2 reads it (pxla.thread_resources) to place activations
        cluster = build_cluster(args, tokenizer, config, mesh)
        timings.wrap_generate(cluster)
        algo = GRPOConfig(num_generations=args.generations, num_iterations=1, beta=0.0,
                          loss_agg_mode="token-mean")
        learner = timings.learner_class()(rl_cluster=cluster, algo_config=algo, reward_fns=random_reward)
        # numpy arrays of strings, as a grain batch gives: RLLearner repeats them with jax.tree.map.
        batches = [{"prompts": np.array([prompt] * args.prompts)} for _ in range(args.warmup + args.steps)]
        timings.step_ends.append(time.perf_counter())
        learner.train(batches)

    timed_ends = timings.step_ends[args.warmup:]
    if len(timed_ends) != args.steps + 1:
        raise RuntimeError(f"{len(timings.step_ends) - 1} GRPO steps ran, not {args.warmup + args.steps}")
    rows = args.prompts * args.generations
    step_s = statistics.median(end - previous for previous, end in zip(timed_ends, timed_ends[1:]))
    rollout_s = statistics.median(timings.generate_s[args.warmup:])
    result = {"framework": "tunix GRPOLearner (jax, vanilla rollout)", "tunix": tunix.__version__,
              "jax": jax.__version__, "device": jax.devices()[0].device_kind, "devices": jax.device_count(),
              "optimizer_steps": int(cluster.actor_trainer.train_steps),
              **step_report(args, rows, step_s, rollout_s, step_s - rollout_s, jax.device_count())}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
