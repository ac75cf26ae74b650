"""GRPO trainer of the maxtext backend (JAX/Flax/optax; checkpoints on the core CheckpointStore).

One step: take prompts_per_step problems -> sample num_generations completions each -> rewards ->
group advantages -> old/reference log-probs when needed -> ppo_epochs updates, each accumulating
gradients over micro-batches -> metrics. Params, optimizer state and batches are sharded on the
mesh built from the `parallel` node with the logical axis rules (MaxText style); the rollout decodes on
a second mesh over the same devices (`parallel.rollout`), the weights resharded to it each step
(`reshard_time_s`), with the prompts split over its data ranks. With grpo.rollout_lag=L >= 1 the rollout has
devices of its own, in L groups, and samples the next L batches while the update trains (trainers/pipeline.py).
Checkpoints hold everything a resume needs to continue bit for bit: params, optimizer state, the data
iterator position, the RNG key and, off-policy, the batches sampled ahead.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn

from framework.backends.maxtext.compile_clock import CompileClock
from framework.backends.maxtext.checkpoint_io import save_hf_checkpoint
from framework.backends.maxtext.config import GRPOConfig
from framework.rl.learning_signal import ZeroGradientWatch
from framework.backends.maxtext.models import ModelConfig, Transformer, abstract_params, kernel_platform
from framework.backends.maxtext.sampler import Sampler, SamplingParams
from framework.backends.maxtext.sharding import (build_mesh, logical_axis_rules, param_shardings, rollout_meshes,
                                                rollout_parallel, shardings_record, tree_bytes, usable_devices)
from framework.backends.maxtext.trainers import aot, rollout, startup
from framework.backends.maxtext.trainers.layout_search import choose_rollout_devices
from framework.backends.maxtext.trainers.in_flight import in_flight_slots, refuse_lag_change
from framework.backends.maxtext.trainers.pipeline import OffPolicyRollouts, group_devices, split_devices
from framework.backends.maxtext.trainers.checkpointing import (STATE_FILE, host_arrays, key_from_json, key_to_json,
                                                               read_state, write_arrays)
from framework.data.math import load_split, system_prompt, train_examples
from framework.backends.maxtext.trainers.evaluation import evaluate
from framework.backends.maxtext.trainers.preflight import (predict_step, preflight_warnings, refuse_out_of_memory,
                                                             resolve_update_plan)
from framework.backends.maxtext.trainers.rollout_plan import prompt_sharing, rollout_tp_for
from framework.backends.maxtext.trainers.update import PolicyUpdate, build_optimizer, learning_rate_schedule
from framework.core.errors import ConfigError, CrucibleError
from framework.core.records import write_atomic
from framework.core.result import TrainingResult
from framework.core.stopping import check_finite
from framework.core.trainer import BaseTrainer
from framework.data.prompts import ShuffledBatches

log = logging.getLogger(__name__)
EXPORT_DIR, SHARDINGS_FILE = "hf_export", "shardings.json"


class GRPOTrainer(BaseTrainer):
    config: GRPOConfig
    handles_stop_requests = True  # SIGINT/SIGTERM: checkpoint at the step boundary, status interrupted
    aot: aot.AheadOfTime | None = None  # the first step's programs compiling in the background

    # ---- lifecycle -----------------------------------------------------------------------------

    def setup(self) -> None:
        """Devices and mesh, data, the model's config: everything that can fail cheaply, before any weights load."""
        task = self.config.task
        self.startup = startup.Startup(self.config.model_source)  # config and tokenizer's thread, beside JAX's devices
        self.mesh = self._build_mesh()
        self.rules = logical_axis_rules(self.config.logical_axis_rules, "backend.adapter.logical_axis_rules")
        self.train_set = train_examples(self.config.data)
        if task.prompts_per_step > len(self.train_set):
            raise ConfigError(f"grpo.prompts_per_step: {task.prompts_per_step} is more than the "
                              f"{len(self.train_set)} training problems of data={self.config.data.name}")
        self.eval_set = load_split(self.config.data, "test", task.eval.num_examples) if self._evaluates else []
        self.model_dir = self.startup.metadata()  # the model's small files: its weights may still come
        self.tokenizer = self.startup.tokenizer()  # in setup: beside init's threads it starved on the GIL (H100 run 2)

    def init(self) -> None:
        """Model, params, optimizer, sampler, data order and RNG; restore the latest checkpoint when resuming."""
        self.compile_clock = CompileClock()  # compiles of init, then of each step
        architecture = ModelConfig.from_pretrained(
            self.model_dir, param_dtype=self.config.task.param_dtype, dtype=self.config.task.compute_dtype)
        boxed = abstract_params(Transformer(architecture))  # the shapes: the same under every remat policy
        self.weight_bytes = tree_bytes(nn.unbox(boxed))
        task, remat = resolve_update_plan(architecture.hf_config, self.config, self.mesh, self.weight_bytes)
        self.config.task = task
        self.model_config = architecture.for_platform(remat, self.config.attention, self.config.decode_attention,
                                                      kernel_platform(), self.config.shared_prefix)
        model = Transformer(self.model_config, self.mesh, self.rules)
        self.placements = self._rollout_placements(boxed)  # before any weights load: a bad layout fails fast
        self.placement = self.placements[0]  # the (first) rollout group's: evaluation decodes there
        self.sharing = prompt_sharing(self.model_config, task, self.placement.mesh, self.rules)  # logged
        self.schedule = learning_rate_schedule(task.optimizer, task.steps, task.ppo_epochs)
        self.scalars = startup.StepScalars(self.schedule)
        optimizer = build_optimizer(task.optimizer, self.schedule)
        shardings = param_shardings(boxed, self.mesh, self.rules)
        self.update = PolicyUpdate(model, task, optimizer, nn.unbox(boxed), shardings, self.mesh, self.rules)
        self.prediction = self._preflight() if task.preflight else {}  # a refusal: before anything compiles
        self.sampling = SamplingParams(max_new_tokens=task.max_new_tokens, temperature=task.temperature,
                                       top_k=task.top_k, top_p=task.top_p, num_samples=task.num_generations)
        if self.config.aot_compile:  # from shapes, before anything lasting is on a device (trainers/startup.py)
            self.aot = aot.start_first_step(self.update, self.placements, boxed, shardings, task, self.sampling)
        self.startup.start_reading_weights(self.model_config)  # on the host, in a thread
        self.encoder = rollout.PromptEncoder(self.tokenizer, system_prompt(self.config.data), task.max_prompt_tokens)
        samplers = [Sampler(model, eos_token_ids=rollout.eos_token_ids(self.tokenizer, self.model_dir),
                            pad_token_id=self.tokenizer.pad_token_id, prompt_bucket=task.max_prompt_tokens,
                            mesh=placement.mesh, rules=self.rules, behaviour_log_probs=task.rollout_lag > 0)
                    for placement in self.placements]  # one per rollout group
        self.sampler = samplers[0]  # evaluation's
        self.off_policy = (OffPolicyRollouts(samplers, self.encoder, self.placements, self.sampling, self._score)
                           if task.rollout_lag else None)  # lag L: the rollout L steps ahead (trainers/pipeline.py)
        aot.finish_first_step(self.aot, self.update, samplers, self.scalars)
        self.params = self.startup.load_weights(self.aot, self.model_config, self.mesh, self.rules)
        self.rng = jax.random.key(self.config.seed)
        self.ref_params = jax.tree.map(jnp.copy, self.params) if task.beta > 0 else None
        self.opt_state = self.update.init_opt_state(self.params)
        self.batches = ShuffledBatches(self.train_set, task.prompts_per_step, seed=self.config.seed)
        self.start_step, self.watch = 0, ZeroGradientWatch()  # the watch: steps at grad_norm 0, kept in checkpoints
        self.policy = dataclasses.replace(task.checkpoint)  # a CheckpointPolicy of its own
        self.store = self.run.checkpoints(self.policy)  # the runtime refused a run dir this run may not resume
        self._restore_latest()
        self.init_compile_s = self.compile_clock.take()  # step rows then hold only their own compiles

    def run_train(self) -> TrainingResult:
        task = self.config.task
        start = time.perf_counter()
        summary = dict(self.prediction)
        rows, step_times, done = {}, [], self.start_step
        steps = range(self.start_step + 1, task.steps + 1)
        with self.run.progress(steps, total=len(steps), desc="grpo", unit="step") as bar:
            for step in bar:
                if self.run.stop_requested:  # a signal during setup/init or a step: stop before the next one
                    break
                rows = self._train_step(step)
                check_finite(rows, step)  # a NaN/inf loss is neither logged as a good row nor saved
                self.watch.observe(step, rows, task.steps)  # all-equal rewards: grad_norm 0, nothing learned
                step_times.append(rows["step_time_s"])
                if self.eval_set and self._due(step, task.eval.every):  # eval.num_examples=0: no evaluation
                    rows |= self._evaluate()
                self.run.logger.log(rows, step)
                bar.set_postfix(reward=f"{rows['reward_mean']:.3f}", acc=f"{rows['accuracy']:.2f}")
                done = step
                if self.policy.due(step, task.steps) or (self.run.stop_requested and self.policy.every > 0):
                    self._save(step)
        if self.off_policy is not None:
            self.off_policy.close()
        interrupted = done < task.steps
        artifacts = self._artifacts(export=not interrupted)
        summary |= {k: v for k, v in rows.items() if isinstance(v, (int, float))}
        steady = step_times[1:] or step_times  # without this process's first step: it compiles
        summary |= {"steps_completed": done, "resumed_from_step": self.start_step,
                    "measured_step_s": statistics.median(steady) if steady else None,
                    "micro_batch_size": task.micro_batch_size,
                    "remat": self.model_config.remat,
                    "init_compile_time_s": self.init_compile_s, "rollout_groups": len(self.placements),
                    **self.layout_search, **self.sharing}
        summary |= (self.aot.metrics() if self.aot is not None else {}) | self.startup.metrics() | self.watch.metrics()
        return TrainingResult(success=not interrupted, metrics=summary, wall_time_s=time.perf_counter() - start,
                              samples=(done - self.start_step) * task.rows_per_step, artifacts=artifacts,
                              warnings=preflight_warnings(summary) + self.watch.warnings(),
                              status="interrupted" if interrupted else "ok",
                              error=f"stopped after step {done} of {task.steps}" if interrupted else None)

    # ---- one step ------------------------------------------------------------------------------

    def _train_step(self, step: int) -> dict[str, float]:
        task = self.config.task
        started = time.perf_counter()
        if self.off_policy is None:
            rollouts, truncated_prompts, (rewards, metrics, advantages), timing = self._rollout_now()
        else:  # B_step, sampled rollout_lag policy versions ago while earlier updates ran, scored during the last one
            rollouts, truncated_prompts, (rewards, metrics, advantages), timing = self.off_policy.take(
                step, self.params, self._draw, task.steps)
        updating = time.perf_counter()
        arrays = {"input_ids": rollouts.input_ids, "attention_mask": rollouts.attention_mask,
                  "completion_mask": rollouts.completion_mask, "advantages": advantages}
        if rollouts.behaviour_log_probs is not None:  # off-policy: the ratio against the sampling policy
            arrays["old_log_probs"] = rollouts.behaviour_log_probs
        next_batch = None  # off-policy: B_{step+L} starts once the update's first program is dispatched
        if self.off_policy is not None:
            next_batch = functools.partial(self.off_policy.start_next, step, self._draw, task.steps)
        self.params, self.opt_state, update_metrics = self.update.start(self.params, self.opt_state,
                                                                        self.ref_params, arrays, next_batch)
        timing["update_dispatch_time_s"] = time.perf_counter() - updating
        updated = None
        if self.off_policy is not None:  # the host scores B_{step+1} while the devices update
            updated = self.off_policy.during_update(step, self.params, task.steps, updating)
        metrics |= update_metrics()  # waits for the update
        jax.block_until_ready(self.params)
        update_s = updated.result() if updated is not None else time.perf_counter() - updating
        if self.off_policy is not None:
            timing |= self.off_policy.after_update(step, self.params, task.steps)
        metrics |= rollout.completion_metrics(rollouts)
        metrics |= {
            "zero_std_group_fraction": rollout.zero_std_group_fraction(rewards, task.num_generations),
            "truncated_prompts": truncated_prompts,
            "learning_rate": float(self.scalars.learning_rate(np.int32((step - 1) * task.ppo_epochs))), **timing,
            "update_time_s": update_s,
            "step_time_s": time.perf_counter() - started,
            "compile_time_s": self.compile_clock.take(),  # JAX tracing + XLA compile during this step
            "rollout_tokens_per_s": float(rollouts.completion_mask.sum()) / timing["rollout_time_s"],
            "update_tokens_per_s": task.ppo_epochs * float(rollouts.attention_mask.sum()) / update_s,
        }
        return metrics

    def _draw(self) -> tuple[Any, jax.Array]:
        """The next step's problems and sampling key (the data order and RNG stream of every mode)."""
        examples = next(self.batches)
        self.rng, rollout_rng = self.scalars.split(self.rng)
        return examples, rollout_rng

    def _rollout_now(self) -> tuple[rollout.Rollouts, int, tuple, dict[str, float]]:
        """grpo.rollout_lag=0: the weights to the rollout layout, then sample with them and score."""
        examples, rollout_rng = self._draw()
        policy, reshard_s = self.placement.policy(self.params)
        resharded = time.perf_counter()
        rollouts, truncated = rollout.generate(self.sampler, self.encoder, policy, examples, rollout_rng, self.sampling)
        del policy  # the rollout copy of the weights: free before the update needs the memory
        rolled_out = time.perf_counter()
        scored = self._score(rollouts)
        return rollouts, truncated, scored, {"reshard_time_s": reshard_s, "rollout_time_s": rolled_out - resharded,
                                             "reward_time_s": time.perf_counter() - rolled_out}

    def _score(self, rollouts: rollout.Rollouts) -> tuple[np.ndarray, dict[str, float], np.ndarray]:
        """Rewards [N], their metrics and the group advantages [N] of a batch."""
        rewards, metrics = rollout.score(rollouts, self.config.task.rewards)
        return rewards, metrics, rollout.advantages(rewards, self.config.task)

    def cleanup(self) -> None:  # no thread or model build outlives a run, a failing one included
        for worker in (self.config.model_source, self.aot, getattr(self, "off_policy", None)):
            if worker is not None:
                worker.close()

    def _evaluate(self) -> dict[str, float]:
        started = time.perf_counter()
        batch_size = min(len(self.eval_set), self.config.task.rows_per_step)
        if self.off_policy is not None:  # no sampling beside evaluation's decode on the rollout devices
            self.off_policy.settle()
        policy, _ = self.placement.policy(self.params)
        metrics = evaluate(self.sampler, self.encoder, policy, self.eval_set,
                           self.config.task.eval.max_new_tokens, batch_size)
        return metrics | {"eval_time_s": time.perf_counter() - started}

    # ---- checkpoints ---------------------------------------------------------------------------

    def _save(self, step: int) -> None:
        """Synchronous: the store checksums and publishes the folder once the arrays are written."""
        in_flight, in_flight_state = self.off_policy.checkpoint_part() if self.off_policy else ({}, {})
        arrays, raw_dtypes = host_arrays({"params": self.params, "opt_state": self.opt_state, **in_flight})
        state = {"data_iterator": self.batches.state_dict(), "rng": key_to_json(self.rng), "dtypes": raw_dtypes,
                 "zero_gradient_watch": self.watch.state_dict(), **in_flight_state}
        self.store.save(step, lambda folder: write_arrays(folder, arrays), state)

    def _restore_latest(self) -> None:
        """Continue from the newest checkpoint whose checksums verify (a damaged one falls back, with a warning)."""
        checkpoint = self.store.resume_point()
        if checkpoint is None:
            return
        state = read_state(checkpoint, {"params": self.params, "opt_state": self.opt_state})
        self.params, self.opt_state = state["params"], state["opt_state"]
        self.batches.load_state_dict(checkpoint.state["data_iterator"])
        self.rng = key_from_json(checkpoint.state["rng"])
        if self.off_policy is not None:  # the batch sampled ahead, as it was when saved
            self.off_policy.restore(checkpoint, STATE_FILE)
        else:  # a checkpoint of a lag-L run that lost its batches in flight would skip their data
            refuse_lag_change(checkpoint)
            in_flight_slots(checkpoint, 0)
        self.start_step = checkpoint.step
        self.watch.restore(checkpoint.state.get("zero_gradient_watch"), checkpoint.step)
        self.run.logger.rewind(checkpoint.step)
        log.info("grpo: resumed from %s", checkpoint.path)

    # ---- helpers -------------------------------------------------------------------------------

    def _build_mesh(self):
        available = usable_devices(self.config.hardware)  # parallel.rollout.devices auto -> the preflight's split
        self.config.parallel, self.layout_search = choose_rollout_devices(self.config, len(available))
        self.rollout_devices, devices = split_devices(available, self.config.parallel.rollout)
        self.devices = devices
        return build_mesh(self.config.parallel, devices)  # logged by _rollout_placements

    def _rollout_placements(self, boxed: Any) -> list[rollout.RolloutPlacement]:
        """A placement per rollout group (grpo.rollout_lag's), in parallel.rollout on a group's devices, its null tp
        picked from the memory the rollout needs beside the training state (rollout_plan.rollout_tp_for)."""
        task = self.config.task
        chosen, groups = self.config.parallel.rollout, group_devices(self.rollout_devices, task.rollout_lag)
        count = len(groups[0])

        def fitting_tp(free_devices: int) -> int:
            return rollout_tp_for(self.model_config, self.weight_bytes, self.mesh.shape, task,
                                  self.config.hardware["memory_gb"], free_devices,
                                  self.rollout_devices != self.devices, rollout_meshes(chosen, count), self.rules)

        layout = (rollout_parallel(chosen, count, task.prompts_per_step, fitting_tp) if chosen is not None
                  else self.config.parallel.resolve(count))
        # said once the rollout's layout is known good: a bad one stays one line
        log.info("grpo: mesh %s over %d %s device(s)", dict(self.mesh.shape), len(self.devices),
                 self.devices[0].platform)
        return rollout.group_placements(layout, groups, self.mesh, boxed, self.rules, self.model_config.dtype)

    @property
    def _evaluates(self) -> bool:
        return self.config.task.eval.every > 0 and self.config.task.eval.num_examples > 0

    def _due(self, step: int, every: int) -> bool:
        return every > 0 and (step % every == 0 or step == self.config.task.steps)

    def _preflight(self) -> dict[str, Any]:
        try:
            reshard_bytes = self.placement.reshard_bytes(self.model_config, self.weight_bytes)
            task = self.config.task
            prediction = predict_step(self.model_config.hf_config, self.config.hardware, self.config.parallel,
                                      self.mesh.size, task, self.placement.layout, reshard_bytes,
                                      remat=self.model_config.remat, rollout_devices=self.placement.separate_devices,
                                      rollout_groups=len(self.placements),
                                      shared_prompt=self.sharing["shared_prefix"])
        except CrucibleError as error:  # advisory: a model the simulator cannot handle still trains
            log.warning("preflight: %s", error)
            return {"preflight_error": str(error)}
        if prediction:
            log.info("preflight: predicted %.3g s per step, %.3g GB per device (fits: %s)",
                     prediction["preflight_predicted_step_s"], prediction["preflight_memory_per_device_gb"],
                     prediction["preflight_fits"])
            refuse_out_of_memory(prediction, self.config.hardware, self.config.task)
        return prediction

    def _write_shardings(self) -> Path:
        """shardings.json: the mesh and the partition spec each trained parameter actually has."""
        path = self.run.path(SHARDINGS_FILE)
        if self.run.is_main:
            record = shardings_record(self.params, self.mesh, self.placement.mesh)
            write_atomic(path, json.dumps(record, indent=2) + "\n")
        return path

    def _artifacts(self, export: bool) -> dict[str, str]:
        artifacts = {"shardings": str(self._write_shardings())}
        steps = self.store.steps()
        if steps:
            artifacts["last_checkpoint"] = str(self.store.root / f"step_{steps[-1]}")
        if self.config.task.export_hf and export:  # an interrupted run exports nothing: its model is not the final one
            params = rollout.to_host(self.params)  # every process takes part in gathering; one writes
            out = self.run.path(EXPORT_DIR)
            if self.run.is_main:
                save_hf_checkpoint(params, self.model_config, self.model_dir, out)
            artifacts["hf_export"] = str(out)
        return artifacts
