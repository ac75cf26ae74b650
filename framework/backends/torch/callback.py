"""TRL's logs into the run's logger and progress bar; checkpoints and the last evaluation when due.

TRL's own reporting is off (report_to="none", disable_tqdm): metrics.jsonl and the one wandb run come
from self.run.logger.

Stopping early (framework.core.stopping): a NaN/inf loss or grad norm raises RunFailure in on_log, which
transformers calls before it saves the step's checkpoint, so the last checkpoint is the last good one
(training_arguments turns transformers' logging_nan_inf_filter off: it would log a NaN loss as a number).
A SIGINT/SIGTERM (run.stop_requested, agreed by every rank) ends training at the next step boundary
with a checkpoint of that step when the task checkpoints.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback

from framework.core.checkpoint import CheckpointPolicy
from framework.core.context import RunContext
from framework.core.stopping import check_finite

# TRL's names -> ours (the task's key_metrics); other "a/b" names become "a_b"
RENAMES = {"rewards/accuracies": "rewards_accuracy", "rewards/margins": "rewards_margin"}
# wall-clock entries of transformers' logs: our own step_time_s / tokens_per_s replace them
DROPPED = ("runtime", "per_second", "total_flos", "train_loss")


def metric_name(name: str) -> str:
    prefix = "eval_" if name.startswith("eval_") else ""
    bare = name[len(prefix):]
    return prefix + RENAMES.get(bare, bare.replace("/", "_"))


class RunCallback(TrainerCallback):
    def __init__(self, run: RunContext, policy: CheckpointPolicy, eval_every: int, desc: str):
        self.run, self.policy, self.eval_every, self.desc = run, policy, eval_every, desc
        self.bar = None
        self.step_start = 0.0
        self.step_time_s = 0.0
        self.tokens_before = 0  # TRL's running num_tokens before this step (a resumed run sets it)
        self.last: dict = {}  # the latest value of every logged metric (the result's metrics)
        self.stopped = False  # a stop request ended training before max_steps

    def on_train_begin(self, args, state, control, **kwargs):
        self.bar = self.run.progress(total=state.max_steps, desc=self.desc, unit="step")
        self.bar.update(state.global_step)

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.step_time_s = time.perf_counter() - self.step_start
        self.bar.update(1)
        if self.policy.due(state.global_step, state.max_steps):
            control.should_save = True
        if state.global_step < state.max_steps and stop_agreed(self.run):
            self.stopped = control.should_training_stop = True
            control.should_save = control.should_save or self.policy.every > 0
        if self.eval_every and state.global_step == state.max_steps:
            control.should_evaluate = True  # "every N steps and after the last one"
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        row = {metric_name(k): v for k, v in (logs or {}).items()
               if isinstance(v, (int, float)) and not any(tag in k for tag in DROPPED)}
        is_train, is_eval = "loss" in row, any(k.startswith("eval_") for k in row)
        if not (is_train or is_eval):
            return  # the end-of-training summary: wall times only
        if is_train:
            check_finite(row, state.global_step)  # before the row is logged and the step saved
            row["step_time_s"] = self.step_time_s
            tokens = row.get("num_tokens")
            if tokens is not None and self.step_time_s > 0:
                row["tokens_per_s"] = (tokens - self.tokens_before) / self.step_time_s
                self.tokens_before = tokens
        else:
            row.pop("epoch", None)
        self.run.logger.log(row, step=state.global_step)
        self.last.update(row)

    def on_train_end(self, args, state, control, **kwargs):
        if self.bar is not None:
            self.bar.close()


def stop_agreed(run: RunContext) -> bool:
    """Whether any rank got a stop request: every rank must stop (and checkpoint) at the same step."""
    import torch
    import torch.distributed as dist

    requested = run.stop_requested
    if not (dist.is_available() and dist.is_initialized()):
        return requested
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([int(requested)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())
