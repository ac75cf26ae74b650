"""docs/reliability.md's table of bad inputs, run through the real command line (tests/cli_batch.py forks one
child per case from an interpreter that imported once). Each case must end with exit status 2 and exactly
one stderr line that starts with `error:` and contains the expected text: no traceback, no internal
exception, nothing silently accepted. The whole table is slow (about a second a case); the default run
takes every 12th case.

`python -m tests.core.test_reliability` prints the table as markdown for docs/reliability.md.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SIM = ["backend=sim", "task=sim", "model=qwen3_8b", "hardware=h100"]
GRPO = ["recipe=grpo_arithmetic_cpu"]
NAN, INF = "nan", "inf"


def _ranges(prefix: list[str], key: str, cases: list[tuple[str, str]]) -> list[tuple[list[str], str]]:
    return [([*prefix, f"{key}={value}"], f"{key}: {expected}") for value, expected in cases]


POSITIVE_INT = [("0", "0 is out of range; valid: >= 1"), ("-1", "-1 is out of range; valid: >= 1"),
                ("1.5", "expected an integer, got 1.5")]
POSITIVE_FLOAT = [("0", "0 is out of range; valid: > 0"), (NAN, "nan is not a finite number; valid: > 0"),
                  (INF, "inf is not a finite number; valid: > 0")]
OPEN_FRACTION = [("1", "1 is out of range; valid: [0, 1)"), ("1.5", "1.5 is out of range; valid: [0, 1)"),
                 ("-0.1", "-0.1 is out of range; valid: [0, 1)"), (NAN, "nan is not a finite number; valid: [0, 1)")]
NON_NEGATIVE = [("-1", "-1 is out of range; valid: >= 0")]

# found in session 21 (each refused before any model is built; run on every test run, not only in the slow table)
SESSION_21: list[tuple[list[str], str]] = [
    ([*GRPO, "parallel.fsdp=2", "parallel.ep=2"],
     "parallel.ep: 2; backend=maxtext trains dense models (no experts), ep must be 1; spread the devices with "
     "parallel.fsdp, parallel.dp or parallel.tp"),
    ([*GRPO, "parallel.rollout.ep=2"], "parallel.rollout.ep: 2; backend=maxtext trains dense models"),
    ([*GRPO, "data=gsm8k"], "data.arithmetic: max_value set, but data=gsm8k (source=hub) is not synthetic; a recipe "
     "for data=arithmetic sets it: add data.arithmetic=null, or use a recipe for this data set"),
]

# found in session 22 (a traceback, an internal exception's line, two lines, or exit 0; run on every test run)
FIXTURES = "tests/core/fixtures"  # model directories whose config.json is damaged
LOCAL_SWEEP = ["-m", *SIM, "hydra/launcher=local"]
SESSION_22: list[tuple[list[str], str]] = [
    ([*SIM, "sim.context_len=1000000000"],
     "sim.context_len=1000000000 is past the model's 40960 positions (max_position_embeddings); valid: at most 40960"),
    ([*SIM, "sim.mode=prefill", "sim.seq_len=50000"], "sim.seq_len=50000 is past the model's 40960 positions"),
    ([*SIM, f"model.path={FIXTURES}/model_not_json"],
     f"model.path: {FIXTURES}/model_not_json/config.json is not JSON (Expecting property name"),
    ([*GRPO, f"model.path={FIXTURES}/model_list"],
     f"model.path: {FIXTURES}/model_list/config.json is a JSON list; valid: a Hugging Face config.json (one JSON "
     "object)"),
    ([*SIM, "logger.wandb.enabled=maybe"], "logger.wandb.enabled: expected true/false, got 'maybe'"),
    ([*SIM, "logger=wandb", "logger.wandb.mode=sideways"],
     "logger.wandb.mode: expected one of ['offline', 'online', 'disabled', 'shared'], got 'sideways'"),
    ([*SIM, "logger=wandb", "logger.wandb.tags=notalist"], "logger.wandb.tags: expected a list, got 'notalist'"),
    ([*SIM, "logger=wandb", "logger.wandb.project=a/b"],
     "logger.wandb: wandb refuses these settings (mode=offline, project='a/b'): Invalid project name 'a/b'"),
    ([*LOCAL_SWEEP, "hydra.launcher.timeout_min=-5"], "hydra.launcher.timeout_min: -5 is out of range; valid: >= 1"),
    ([*LOCAL_SWEEP, "hydra.launcher.tasks_per_node=0"],
     "hydra.launcher.tasks_per_node: 0 is out of range; valid: >= 1 (or null) (set by hardware.launcher.tasks_per_node "
     "unless given)"),
    ([*SIM, "task.objective.metric=nope"], "task.objective.metric: 'nope' is not a number the task reports; valid: "),
    (["-m", "recipe=sim_search", "hydra.sweeper.n_trials=0"], "hydra.sweeper.n_trials: 0 is out of range; valid: >= 1"),
    ([*SIM, f"model.path={FIXTURES}/model_no_layers"],
     f"model.path: {FIXTURES}/model_no_layers/config.json: num_hidden_layers: 0 is out of range; valid: >= 1"),
]

# found in session 23 (a data.path that names nothing said `None: no such jsonl file` or took the recipe's sample
# name for a local file, naming no key; run on every test run)
SFT = ["recipe=sft_torch_cpu"]
SESSION_23: list[tuple[list[str], str]] = [
    ([*SFT, "data.source=local"], "data.path: chat: no such file or folder (data.source=local); valid: a jsonl file, "
     "or a folder holding train.jsonl (and test.jsonl)"),
    ([*SFT, "data.source=local", "data.path=null"],
     "data.path: null; data.source=local needs a jsonl file, or a folder holding train.jsonl (and test.jsonl)"),
    ([*SFT, "data.source=hub", "data.path=null"], "data.path: null; data.source=hub needs a data set id"),
    ([*SFT, "data.path=nope"], "data.path: 'nope' is not a shipped sample; valid: one of ['chat', 'gsm8k', "
     "'preference', 'text']"),
    # a hardware file without launcher: (Hydra's 2-line warning, then `Interpolation key ... not found`)
    ([*LOCAL_SWEEP, "~hardware.launcher"],
     "hydra.launcher.cpus_per_task: ${hardware.launcher.cpus_per_task} does not resolve (Interpolation key "
     "'hardware.launcher.cpus_per_task' not found); the hardware file's launcher: {gpus_per_node, tasks_per_node, "
     "cpus_per_task, mem_gb} sets it: add it there, or set hydra.launcher.cpus_per_task=..."),
]

# found in session 24 (Hydra's `Cannot merge DictConfig with ListConfig` named the key, not what it takes; run on
# every test run)
PARALLEL_KEYS = "parallel.KEY=VALUE with KEY one of dp, fsdp, tp, pp, ep, cp, rollout"
SESSION_24: list[tuple[list[str], str]] = [
    ([*SIM, "parallel=[1,2]"], f"parallel=[1,2]: parallel is a mapping, not a list; valid: its keys one at a time, "
     f"{PARALLEL_KEYS}"),
    ([*SIM, "parallel.rollout=[1]"], "parallel.rollout=[1]: parallel.rollout is a mapping, not a list; valid: its keys "
     "one at a time, parallel.rollout.KEY=VALUE with KEY one of dp, fsdp, tp, pp, ep, cp, placement, devices"),
    ([*SIM, "patches.enable={a: 1}"],
     "patches.enable={a: 1}: patches.enable is a list, not a mapping; valid: a list, patches.enable=[a,b]"),
    ([*SIM, "parallel=5"], f"parallel: expected a mapping of ParallelConfig fields, got 5; valid: its keys one at a "
     f"time, {PARALLEL_KEYS}"),
    # a number for a group was `ValueError: Config group override must be a string or a list. Got int`, exit 1
    ([*SIM, "logger=3"], "unknown logger option '3'; valid: jsonl, wandb"),
    ([*SIM, "backend=true"], "unknown backend option 'true'; valid: maxtext, megatron, mlx, sim, torch"),
    # was: exit 0, qwen3_8b with qwen3_30b_a3b's num_experts: 128 (Hydra merged the second over the first)
    ([*SIM, "model=[qwen3_30b_a3b,qwen3_8b]"], "model=[qwen3_30b_a3b,qwen3_8b]: one model option per run (Hydra "
     "merges a list's options, each over the one before); valid: one of deepseek_v3, "),
    # were AttributeError / TypeError, exit 1
    ([*SIM, "patches=3"], "patches: expected a mapping of PatchesConfig fields, got 3; valid: its keys one at a time, "
     "patches.KEY=VALUE with KEY one of enable, disable"),
    ([*SIM, "patches.enable=3"], "patches.enable: expected a list, got 3"),
    # Hydra's argparse: its 7-line usage block, then the error
    (["--cfg", "nope", *SIM], "argument --cfg/-c: invalid choice: 'nope' (choose from 'job', 'hydra', 'all'); python "
     "run.py --hydra-help lists the flags"),
    (["backend=sim", "-m", "task=sim"], "put Hydra's flags (-m, --cfg job, -cp DIR, ...) before the key=value "
     "overrides; python run.py --hydra-help lists the flags"),
    # the task node's own keys: two lines and TypeError / AttributeError (objective=3 after the run), exit 1
    ([*SIM, "task.key_metrics=3"], "task.key_metrics: expected a list, got 3 (or null)"),
    ([*SIM, "task.objective=3"], "task.objective: expected a mapping for TaskObjective, got 3 (or null)"),
    ([*SIM, "~task.objective.metric"], "task.objective.metric: missing key"),
    # a sweep read them as it ended: a UserWarning, exit 0 (key_metrics) or a 3-line warning (sweep_plot)
    ([*LOCAL_SWEEP, "task.key_metrics=3"], "task.key_metrics: expected a list, got 3 (or null)"),
    ([*LOCAL_SWEEP, "task.sweep_plot=nope.fn"], "task.sweep_plot: cannot import 'nope.fn' (No module named 'nope')"),
    # every reward 0 whatever the model writes: was exit 0 after training on nothing
    ([*GRPO, "grpo.rewards.correctness=0"], "grpo.rewards: every weight is 0 (correctness=0, format=0.0, tag_count=0.0): "
     "every reward would be 0 and the model learn nothing; valid: at least one weight other than 0"),
    # config dirs: Hydra's 3-line ValueError (exit 1); a 2-line warning, then the run without the folder (exit 0)
    (["--config-path", "conf/config.yaml", *SIM], "--config-path: 'conf/config.yaml' is no folder (absolute, or "
     "relative to run.py's folder "),
    ([*SIM, "hydra.searchpath=[file:///nope]"],
     "hydra.searchpath: 'file:///nope' is no folder; valid: file://DIR of a folder, or pkg://PACKAGE"),
    # greedy sampling: every group's completions alike, grad_norm 0 at every step, exit 0
    ([*GRPO, "grpo.top_k=1"], "grpo.top_k: 1 samples greedily: a group's completions are all the same, so are their "
     "rewards, and advantage_estimator=grpo learns nothing; valid: 0 (off) or >= 2"),
]

# found in session 25 (exit 0, the key read by nothing or the contradiction settled silently; run on every test run)
TASK_NODE_KEYS = ("valid: name, key_metrics, resume_may_change, sweep_plot, objective (a task's settings live under "
                  "its name")
SESSION_25: list[tuple[list[str], str]] = [
    ([*SIM, "+task.extra=1"], f"task.extra: unknown key of the task node; {TASK_NODE_KEYS}: sim.KEY=VALUE)"),
    ([*GRPO, "+task.steps=10"], f"task.steps: unknown key of the task node; {TASK_NODE_KEYS}: grpo.KEY=VALUE)"),
    ([*SIM, "task.objective.metric=fits"], "task.objective.metric: 'fits' is not a number the task reports; valid: "
     "devices, latency_s, "),
    ([*GRPO, "patches.enable=[maxtext.compilation_cache]", "patches.disable=[maxtext.compilation_cache]"],
     "patches: 'maxtext.compilation_cache' is in both patches.enable and patches.disable; valid: one of them"),
]

# found in session 26 (exit 0: a top-k above the experts, a string read as true, a negative eps; a NaN named no key)
MOE = ["backend=sim", "task=sim", "model=qwen3_30b_a3b", "hardware=h100"]
SESSION_26: list[tuple[list[str], str]] = [
    ([*MOE, "model.hf_config.num_experts_per_tok=200"], "model.hf_config.num_experts_per_tok: 200 is more than the "
     "model's num_experts=128; valid: 1 to 128 (experts each token is routed to)"),
    ([*SIM, "model.hf_config.tie_word_embeddings=maybe"],
     "model.hf_config.tie_word_embeddings: expected true/false, got 'maybe'"),
    ([*SIM, "model.hf_config.rms_norm_eps=-1"], "model.hf_config.rms_norm_eps: -1 is out of range; valid: > 0"),
    ([*SIM, "model.hf_config.rope_theta=nan"],
     "model.hf_config.rope_theta: nan is not a finite number; valid: a finite number"),
    (["recipe=sim_sweep", "parallel.tp=2"], "recipe=sim_sweep sweeps parallel.ep (hydra.sweeper.params), and this is "
     "one run (no -m); valid: -m to run its jobs (python run.py -m recipe=sim_sweep ...), or a value for each of "
     "parallel.ep for one run"),
    (["recipe=sim_search"], "recipe=sim_search sweeps parallel.tp, parallel.ep, sim.batch (hydra.sweeper.params)"),
    *[([f"recipe={recipe}", "backend.adapter.cache_dir=run.py/cache"], "backend.adapter.cache_dir: cannot make the "
       "folder 'run.py/cache' (Not a directory: run.py/cache); valid: a path where a folder can be made and written "
       "(default outputs/cache, or CRUCIBLE_CACHE=DIR)")
      for recipe in ("sft_torch_cpu", "sft_mlx_cpu", "grpo_arithmetic_cpu", "pretrain_megatron_cpu")],
    ([*GRPO, "backend.adapter.cache_dir="], "backend.adapter.cache_dir: empty; valid: a path where a folder can be "
     "made"),
    ([*SFT, "backend.adapter.dataloader_num_workers=-1"],
     "backend.adapter.dataloader_num_workers: -1 is out of range; valid: >= 0"),
    ([*GRPO, "data.arithmetic.num_test=0"], "data.arithmetic.num_test: 0 is out of range; valid: >= 1"),
    ([*GRPO, "data.arithmetic.num_operands=1"], "data.arithmetic.num_operands: 1 is out of range; valid: >= 2"),
    ([*GRPO, "data.arithmetic.ops=[]"], "data.arithmetic.ops: []; valid: a non-empty list of '+', '-', '*'"),
    (["recipe=grpo_gsm8k_cpu", "data=gsm8k_local", "data.path=nope/gsm8k"], "data.path: nope/gsm8k: no such file or "
     "folder (data.source=local, relative to "),
    (["-m", *SIM, "sim.batch=range(1,0)"], "sim.batch=range(1,0): sweeps over no values; valid: at least one, e.g. "
     "range(start, stop[, step]) with start < stop for a positive step, or a,b,c"),
    (["--shell-completion"], "--shell-completion: Expecting one subcommand from ['install', 'uninstall', 'query'] to "
     "be set; valid: install=SHELL or uninstall=SHELL with SHELL one of bash, fish, zsh (query=SHELL is for the shell "
     "itself: it reads COMP_LINE)"),
    (["--shell-completion", "install=nope"], "--shell-completion: No completion plugin for 'nope' found, available "
     "bash fish zsh; valid: install=SHELL"),
    ([*SIM, "~sim"], "sim: missing; task=sim reads its settings there (conf/task/sim.yaml); valid: keep it, and set "
     "its keys one at a time, sim.KEY=VALUE"),
    ([*GRPO, "~grpo"], "grpo: missing; task=grpo reads its settings there (conf/task/grpo.yaml)"),
    ([*SIM, "hydra.job.name=x/y"], "hydra.job.name: 'x/y' holds a /; it names the run's log file, <run dir>/"
     "<name>.log; valid: a name without /"),
    ([*SIM, "recipe=[sim_sweep]"], "the config sweeps parallel.tp, parallel.ep (hydra.sweeper.params), and this is one "
     "run (no -m); valid: -m to run its jobs (python run.py -m ...)"),
    (["task=calibrate", "hardware=cpu", "calibrate.output=run.py/t.json"], "calibrate.output: cannot make the folder "
     "of run.py/t.json (File exists: run.py); valid: a file path whose folder can be made (null: <run "
     "dir>/efficiency_table.json)"),
    (["task=calibrate", "hardware=cpu", "calibrate.output=conf"],
     "calibrate.output: conf is a folder; valid: a file path"),
    (["--cfg", "job", "-p", "nope"], "--package: 'nope' is no key of the composed config; valid: a key or dotted path "
     "in it (python run.py --cfg job shows them), e.g. parallel, model.hf_config"),
]

CASES: list[tuple[list[str], str]] = [
    # ---- groups: unknown, removed, null
    *[([f"{g}=nope"], f"unknown {g} option 'nope'; valid:") for g in ("backend", "task", "model", "hardware",
                                                                       "data", "logger", "recipe")],
    *[([*SIM, f"~{g}"], f"{g}: a run needs one {g} option, it cannot be removed") for g in
      ("backend", "task", "model", "hardware", "logger")],
    *[([*SIM, f"{g}=null"], f"{g}: a run needs one {g} option, it cannot be removed") for g in
      ("backend", "task", "model", "hardware", "logger")],
    ([*SIM, "recipe=null"], "recipe=null: leave recipe out (or ~recipe) for none"),
    (["-m", "model=qwen3_8b,qwen9"], "unknown model option 'qwen9'"),
    (["-m", "hardware=h100,h1000"], "unknown hardware option 'h1000'"),
    # ---- override grammar and keys
    ([*SIM, "parallel.tp=[1,"], "cannot parse override 'parallel.tp=[1,'"),
    ([*SIM, "sim.tpp=2"], "unknown key 'sim.tpp'; valid keys under sim:"),
    ([*SIM, "parallel.xx=2"], "unknown key 'parallel.xx'"),
    ([*SIM, "+parallel.xp=2"], "parallel.xp: unknown key; valid: cp, dp, ep, fsdp, pp, rollout, tp"),
    ([*SIM, "+sim.extra=1"], "sim.extra: unknown key for SimTask"),
    ([*SIM, "+backend.adapter.fast=true"], "backend.adapter.fast: unknown key for SimAdapter"),
    ([*SIM, "+sim.extra=${missing_key}"], "sim.extra"),
    ([*SIM, "~sim.batch"], "sim.batch: missing key required by SimTask"),
    ([*SIM, "~model.hf_config"], "model.hf_config: missing key required by ModelConfig"),
    ([*SIM, "~hardware.memory_gb"], "hardware.memory_gb: missing key required by HardwareConfig"),
    ([*SIM, "backend.adapter._target_=framework.backends.nope.Adapter"], "cannot import 'framework.backends.nope.Adapter'"),
    ([*SIM, "patches.disable=[no.such.patch]"], "unknown patch id(s) ['no.such.patch']"),
    ([*SIM, "patches.enable=[no.such.patch]"], "unknown patch id(s) ['no.such.patch']"),
    # ---- top-level values
    ([*SIM, "seed=-1"], "seed: -1 is out of range; valid: [0, 4294967295]"),
    ([*SIM, "seed=4294967296"], "seed: 4294967296 is out of range; valid: [0, 4294967295]"),
    ([*SIM, "seed=1e23"], "seed: expected an integer, got 1e+23"),
    ([*SIM, "seed=abc"], "seed: expected an integer, got 'abc'"),
    ([*SIM, "seed=nan"], "seed: nan is not a finite number; valid: [0, 4294967295]"),
    ([*SIM, "seed=true"], "seed: expected an integer, got True"),
    ([*SIM, "debug=maybe"], "debug: expected true/false, got 'maybe'"),
    ([*SIM, "progress=2"], "progress: expected true/false, got 2"),
    # ---- the parallel layout
    *[([*SIM, f"parallel.{axis}=0"], f"parallel.{axis}: 0") for axis in ("dp", "fsdp", "tp", "pp", "ep", "cp")],
    *[([*SIM, f"parallel.{axis}=two"], f"parallel.{axis}: expected an integer, got 'two'") for axis in ("dp", "tp")],
    ([*SIM, "parallel.tp=-2"], "parallel.tp: -2 is not valid"),
    ([*SIM, "parallel.tp=-1", "parallel.dp=-1"], "parallel"),
    # ---- hardware file values
    *_ranges(SIM, "hardware.peak_tflops.bf16", [("0", "0 is out of range; valid: > 0 (or null)"),
                                                ("-5", "-5 is out of range; valid: > 0 (or null)"),
                                                (INF, "inf is not a finite number; valid: > 0 (or null)"),
                                                (NAN, "nan is not a finite number; valid: > 0 (or null)"),
                                                ("fast", "expected a number, got 'fast' (or null)")]),
    *_ranges(SIM, "hardware.peak_tflops.fp32", [("0", "0 is out of range; valid: > 0 (or null)")]),
    *_ranges(SIM, "hardware.memory_gb", POSITIVE_FLOAT),
    *_ranges(SIM, "hardware.hbm_tb_s", POSITIVE_FLOAT),
    *_ranges(SIM, "hardware.devices_per_node", [("0", "0 is out of range; valid: >= 1"),
                                                ("eight", "expected an integer, got 'eight'")]),
    *_ranges(SIM, "hardware.nodes", [("0", "0 is out of range; valid: >= 1")]),
    *_ranges(SIM, "hardware.intra_node_gb_s", [("0", "0 is out of range; valid: > 0 (or null)")]),
    *_ranges(SIM, "hardware.inter_node_gb_s", [("-1", "-1 is out of range; valid: > 0 (or null)")]),
    ([*SIM, "hardware.accelerator=fpga"], "hardware.accelerator: expected one of ['gpu', 'tpu', 'cpu', 'mps']"),
    ([*SIM, "hardware.efficiency_table=/no/table.json"], "efficiency table '/no/table.json' does not exist"),
    # ---- model file values
    *[([*SIM, f"model.hf_config.{key}={value}"], f"model.hf_config.{key}: {value} is out of range; valid: >= 1")
      for key in ("num_attention_heads", "hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size",
                  "num_key_value_heads") for value in ("0", "-4")],
    ([*SIM, "model.hf_config.num_attention_heads=2.5"], "model.hf_config.num_attention_heads: expected an integer"),
    ([*SIM, "model.hf_config.num_key_value_heads=5"], "num_key_value_heads: 5 must divide num_attention_heads=32"),
    ([*SIM, "model.dtype=float8"], "model.dtype: expected one of ['float32', 'bfloat16', 'float16']"),
    ([*SIM, "model.random_init=yes"], "model.random_init: expected true/false, got 'yes'"),
    ([*SIM, "model.path=/no/such/model"], "model.path: model directory '/no/such/model' does not exist"),
    ([*SIM, "model.path=/etc/hostname"], "model.path: '/etc/hostname' is a file"),
    ([*SIM, "model.path=/"], "model.path: '/' holds no config.json"),
    # ---- the simulator task
    *_ranges(SIM, "sim.batch", POSITIVE_INT),
    *_ranges(SIM, "sim.seq_len", POSITIVE_INT[:2]),
    *_ranges(SIM, "sim.microbatches", POSITIVE_INT[:1]),
    *_ranges(SIM, "sim.context_len", POSITIVE_INT[1:2]),  # a count: the simulator decodes after >= 1 cached token
    ([*SIM, "sim.dtype=fp8"], "sim.dtype: expected one of ['bfloat16', 'float8', 'float32'], got 'fp8'"),
    ([*SIM, "sim.mode=generate"], "sim.mode: expected one of ['prefill', 'decode', 'train'], got 'generate'"),
    ([*SIM, "sim.recompute=sometimes"], "sim.recompute: expected true/false, got 'sometimes'"),
    # ---- GRPO (all refused by validation, before JAX starts)
    *_ranges(GRPO, "grpo.steps", POSITIVE_INT),
    *_ranges(GRPO, "grpo.prompts_per_step", POSITIVE_INT[:1]),
    *_ranges(GRPO, "grpo.num_generations", POSITIVE_INT[:1]),
    *_ranges(GRPO, "grpo.max_prompt_tokens", POSITIVE_INT[:2]),
    *_ranges(GRPO, "grpo.max_new_tokens", POSITIVE_INT[:1]),
    *_ranges(GRPO, "grpo.temperature", [*POSITIVE_FLOAT, ("-1", "-1 is out of range; valid: > 0")]),
    *_ranges(GRPO, "grpo.top_p", [("0", "0 is out of range; valid: (0, 1]"), ("1.5", "1.5 is out of range; valid: (0, 1]")]),
    *_ranges(GRPO, "grpo.top_k", NON_NEGATIVE),
    *_ranges(GRPO, "grpo.clip_low", [("1", "1 is out of range; valid: [0, 1)"), ("-0.2", "-0.2 is out of range")]),
    *_ranges(GRPO, "grpo.clip_high", NON_NEGATIVE),
    *_ranges(GRPO, "grpo.beta", [*NON_NEGATIVE, (NAN, "nan is not a finite number; valid: >= 0")]),
    *_ranges(GRPO, "grpo.ppo_epochs", POSITIVE_INT[:1]),
    *_ranges(GRPO, "grpo.micro_batch_size", POSITIVE_INT[:1]),
    *_ranges(GRPO, "grpo.logprob_chunk_size", POSITIVE_INT[:1]),
    *_ranges(GRPO, "grpo.optimizer.learning_rate", POSITIVE_FLOAT),
    *_ranges(GRPO, "grpo.optimizer.b1", OPEN_FRACTION),
    *_ranges(GRPO, "grpo.optimizer.b2", OPEN_FRACTION[:2]),
    *_ranges(GRPO, "grpo.optimizer.eps", POSITIVE_FLOAT[:2]),
    *_ranges(GRPO, "grpo.optimizer.weight_decay", [("-0.1", "-0.1 is out of range; valid: >= 0")]),
    *_ranges(GRPO, "grpo.optimizer.warmup_steps", NON_NEGATIVE),
    *_ranges(GRPO, "grpo.optimizer.min_lr_ratio", [("1.5", "1.5 is out of range; valid: [0, 1]")]),
    *_ranges(GRPO, "grpo.optimizer.max_grad_norm", [(INF, "inf is not a finite number; valid: >= 0")]),
    *_ranges(GRPO, "grpo.eval.every", NON_NEGATIVE),
    *_ranges(GRPO, "grpo.checkpoint.every", NON_NEGATIVE),
    *_ranges(GRPO, "grpo.checkpoint.keep", POSITIVE_INT[:1]),
    ([*GRPO, "grpo.rewards.correctness=high"], "grpo.rewards: correctness: expected a number, got 'high'"),
    ([*GRPO, "grpo.rewards.correctness=nan"], "grpo.rewards: correctness: nan is not a finite number"),
    ([*GRPO, "+grpo.rewards.speed=1.0"], "grpo.rewards: speed is not a reward"),
    ([*GRPO, "grpo.advantage_estimator=ppo"], "grpo.advantage_estimator: unknown advantage estimator 'ppo'"),
    ([*GRPO, "grpo.loss_normalization=batch"], "grpo.loss_normalization: expected one of"),
    ([*GRPO, "grpo.optimizer.schedule=step"], "grpo.optimizer.schedule: expected one of"),
    ([*GRPO, "grpo.param_dtype=int8"], "grpo.param_dtype: expected one of"),
    ([*GRPO, "grpo.micro_batch_size=7"], "grpo.micro_batch_size: 7 must divide"),
    ([*GRPO, "grpo.num_generations=1"], "grpo.num_generations: 1 must be >= 2"),
    ([*GRPO, "parallel.cp=2"], "parallel.cp: 2; backend=maxtext has no context parallelism"),
    ([*GRPO, "backend.adapter.decode_attention=flash"], "backend.adapter.decode_attention: 'flash' is not one of"),
    ([*GRPO, "backend.adapter.shared_prefix=yes"], "backend.adapter.shared_prefix: 'yes' is not one of auto, on, off"),
    ([*GRPO, "backend.adapter.remat=some"], "backend.adapter.remat: 'some' is not one of none, minimal, full, auto"),
    ([*GRPO, "backend.adapter.attention=cudnn"], "backend.adapter.attention: cudnn has no float32 kernel"),
    ([*GRPO, "parallel.tp=3"], "parallel.rollout: dp x fsdp = 3 does not divide grpo.prompts_per_step=16"),
    ([*GRPO, "parallel.fsdp=4", "parallel.rollout.tp=3"],
     "parallel.rollout: 4 devices do not split into the fixed axes' product 3"),
    ([*GRPO, "grpo.max_new_tokens=100000"],
     "grpo.max_new_tokens: 100000 + grpo.max_prompt_tokens 32 = 100032 tokens exceed the model's 1024 positions"),
    ([*GRPO, "model.hf_config.max_position_embeddings=8"],
     "grpo.max_new_tokens: 2 + grpo.max_prompt_tokens 32 = 34 tokens exceed the model's 8 positions"),
    ([*GRPO, "~model.hf_config.max_position_embeddings", "grpo.max_new_tokens=100000"],  # the decoder's default
     "grpo.max_new_tokens: 100000 + grpo.max_prompt_tokens 32 = 100032 tokens exceed the model's 4096 positions"),
    ([*GRPO, "data=chat_sample"], "data=chat_sample: task=grpo needs a math (question/answer) data set"),
    ([*GRPO, "data.train_limit=0"], "data.train_limit: 0 is out of range; valid: >= 1 (or null)"),
    ([*GRPO, "data.train_limit=-3"], "data.train_limit: -3 is out of range; valid: >= 1 (or null)"),
    ([*GRPO, "model.path=/"], "model.path: '/' holds no config.json"),
    ([*GRPO, "hardware=h100"], "hardware=h100 asks for a gpu"),
    ([*GRPO, "hardware=tpu_v5e"], "hardware=tpu_v5e asks for a tpu"),
    # ---- SFT / DPO / pretrain schemas (refused by validation whatever backend runs them)
    *_ranges(["task=sft"], "sft.steps", POSITIVE_INT[:1]),
    *_ranges(["task=sft"], "sft.global_batch_size", POSITIVE_INT[:1]),
    *_ranges(["task=sft"], "sft.max_seq_length", POSITIVE_INT[:2]),
    *_ranges(["task=sft"], "sft.lora.rank", POSITIVE_INT[:1]),
    *_ranges(["task=sft"], "sft.lora.alpha", POSITIVE_FLOAT[:1]),
    *_ranges(["task=sft"], "sft.lora.dropout", OPEN_FRACTION[:1]),
    *_ranges(["task=sft"], "sft.optimizer.learning_rate", POSITIVE_FLOAT),
    *_ranges(["task=sft"], "sft.optimizer.b2", OPEN_FRACTION[:1]),
    *_ranges(["task=dpo"], "dpo.beta", POSITIVE_FLOAT),
    *_ranges(["task=dpo"], "dpo.label_smoothing", [("0.6", "0.6 is out of range; valid: [0, 0.5]")]),
    *_ranges(["task=dpo"], "dpo.max_prompt_length", POSITIVE_INT[:1]),
    *_ranges(["task=dpo"], "dpo.optimizer.b1", OPEN_FRACTION[1:2]),
    (["task=dpo", "dpo.loss_type=kto"], "dpo.loss_type: expected one of ['sigmoid', 'ipo', 'hinge', 'robust']"),
    *_ranges(["task=pretrain"], "pretrain.seq_length", POSITIVE_INT[:1]),
    *_ranges(["task=pretrain"], "pretrain.eval.iters", POSITIVE_INT[:1]),
    *_ranges(["task=pretrain"], "pretrain.optimizer.eps", POSITIVE_FLOAT[1:2]),
    *_ranges(["task=calibrate"], "calibrate.repeats", POSITIVE_INT[:1]),
    *_ranges(["task=calibrate"], "calibrate.warmup", NON_NEGATIVE),
    *SESSION_21,
    *SESSION_22,
    *SESSION_23,
    *SESSION_24,
    *SESSION_25,
    *SESSION_26,
]
IDS = [" ".join(args[-1:]) + f" #{n}" for n, (args, _) in enumerate(CASES)]


def run_batch(cases: list[tuple[list[str], str]], tmp_path) -> list[dict]:
    argv = [[*args, f"hydra.run.dir={tmp_path}/run{n}", f"hydra.sweep.dir={tmp_path}/sweep{n}"]
            for n, (args, _) in enumerate(cases)]
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "cli_batch.py")], input=json.dumps(argv),
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def problems(cases, results) -> list[str]:
    found = []
    for (args, expected), result in zip(cases, results):
        lines = [line for line in result["stderr"].splitlines() if line.strip()]
        ok = (result["rc"] == 2 and len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
              and "Traceback" not in result["stderr"])
        if not ok:
            found.append(f"{' '.join(args)}: rc={result['rc']} stderr={result['stderr'][-400:]!r}")
    return found


def test_every_twelfth_bad_input_is_one_clear_line(tmp_path):
    sample = CASES[::12]
    assert not problems(sample, run_batch(sample, tmp_path))


def test_session_21s_refusals_are_one_line(tmp_path):
    assert not problems(SESSION_21, run_batch(SESSION_21, tmp_path))


def test_session_22s_refusals_are_one_line(tmp_path):
    assert not problems(SESSION_22, run_batch(SESSION_22, tmp_path))


def test_session_23s_refusals_are_one_line(tmp_path):
    assert not problems(SESSION_23, run_batch(SESSION_23, tmp_path))


def test_session_24s_refusals_are_one_line(tmp_path):
    assert not problems(SESSION_24, run_batch(SESSION_24, tmp_path))


def test_session_25s_refusals_are_one_line(tmp_path):
    assert not problems(SESSION_25, run_batch(SESSION_25, tmp_path))


def test_session_26s_refusals_are_one_line(tmp_path):
    assert not problems(SESSION_26, run_batch(SESSION_26, tmp_path))


def test_an_adapters_own_check_is_its_line_not_hydras_wrapping(tmp_path):
    args = [*GRPO, "backend.adapter.remat=some"]
    result = run_batch([(args, "")], tmp_path)[0]
    assert result["rc"] == 2
    assert result["stderr"].strip() == "error: backend.adapter.remat: 'some' is not one of none, minimal, full, auto"


@pytest.mark.parametrize("overrides", [["backend.adapter.attention=cudnn"], ["parallel.tp=3"],
                                       ["parallel.fsdp=4", "parallel.rollout.tp=3"], ["grpo.max_new_tokens=100000"],
                                       ["model.hf_config.max_position_embeddings=8"],
                                       ["~model.hf_config.max_position_embeddings", "grpo.max_new_tokens=100000"]])
def test_what_the_grpo_trainer_found_late_is_one_line(overrides, tmp_path):
    """Session 19 found these after two INFO lines (the mesh, the tokenizer's time; cudnn in float32, checked by the
    model) or not at all (100000 new tokens decoded for minutes, deaf to SIGTERM). The rollout's layout needs the
    trainer's devices, so the trainer says its mesh once the layout is good; the others are checked before the run."""
    case = [(args, expected) for args, expected in CASES if args == [*GRPO, *overrides]]
    assert len(case) == 1 and not problems(case, run_batch(case, tmp_path))


@pytest.mark.slow
def test_every_bad_input_is_one_clear_line(tmp_path):
    assert len(CASES) >= 150
    assert problems(CASES, run_batch(CASES, tmp_path)) == []


def markdown() -> str:
    rows = ["| # | command line (after `python run.py`) | the one line on stderr contains (exit 2) |", "|---|---|---|"]
    for n, (args, expected) in enumerate(CASES, 1):
        shown = " ".join(args).replace("|", "\\|")
        rows.append(f"| {n} | `{shown}` | `{expected.replace('|', '/')}` |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
