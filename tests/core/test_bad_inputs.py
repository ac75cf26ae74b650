"""Each bad input gets one line on stderr that names the key or file, and a non-zero exit."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

SIM = ["backend=sim", "task=sim", "model=qwen3_8b", "hardware=h100"]
GRPO = ["backend=maxtext", "task=grpo", "model=tiny_qwen2", "hardware=cpu", "data=gsm8k_sample"]

BAD_INPUTS = [
    # (overrides, text the one-line error must contain)
    (["model=qwen9"], "unknown model option 'qwen9'; valid: deepseek_v3"),
    (["backend=pytorch_xla"], "unknown backend option 'pytorch_xla'; valid:"),
    (["task=pretrain_xyz"], "unknown task option 'pretrain_xyz'; valid:"),
    (["hardware=h1000"], "unknown hardware option 'h1000'; valid: auto, a100, cpu, h100"),
    (["recipe=nope"], "unknown recipe option 'nope'; valid:"),
    (["logger=tensorboardx"], "unknown logger option 'tensorboardx'; valid: jsonl, wandb"),
    (["-m", "model=qwen3_8b,qwen9"], "unknown model option 'qwen9'"),
    ([*SIM, "sim.tpp=2"], "unknown key 'sim.tpp'; valid keys under sim:"),
    ([*SIM, "parallel.tp=two"], "parallel.tp: expected an integer, got 'two'"),
    ([*SIM, "+parallel.xp=2"], "parallel.xp: unknown key; valid: cp, dp, ep, fsdp, pp, rollout, tp"),
    ([*SIM, "sim.dtype=fp8"], "sim.dtype: expected one of ['bfloat16', 'float8', 'float32'], got 'fp8'"),
    ([*SIM, "sim.mode=generate"], "sim.mode: expected one of ['prefill', 'decode', 'train'], got 'generate'"),
    ([*SIM, "sim.recompute=sometimes"], "sim.recompute: expected true/false, got 'sometimes'"),
    ([*SIM, "~sim.batch"], "sim.batch: missing key required by SimTask"),
    ([*SIM, "~model.hf_config"], "model.hf_config: missing key required by ModelConfig"),
    ([*SIM, "model.dtype=float8"], "model.dtype: expected one of ['float32', 'bfloat16', 'float16']"),
    ([*SIM, "hardware.devices_per_node=eight"], "hardware.devices_per_node: expected an integer, got 'eight'"),
    ([*SIM, "hardware.accelerator=fpga"], "hardware.accelerator: expected one of ['gpu', 'tpu', 'cpu', 'mps']"),
    ([*SIM, "model.path=/no/such/model"], "model.path: model directory '/no/such/model' does not exist"),
    ([*SIM, "hardware.efficiency_table=/no/table.json"], "hardware.efficiency_table: efficiency table '/no/table.json' does not exist"),
    ([*SIM, "seed=abc"], "seed: expected an integer, got 'abc'"),
    ([*SIM, "patches.disable=[no.such.patch]"], "patches.enable/disable: unknown patch id(s) ['no.such.patch'] for backend 'sim'"),
    ([*SIM, "parallel.tp=[1,"], "parallel.tp=[1,"),
    ([*SIM, "backend.adapter._target_=framework.backends.nope.Adapter"], "backend.adapter._target_: cannot import 'framework.backends.nope.Adapter'"),
    ([*SIM, "+backend.adapter.fast=true"], "backend.adapter.fast: unknown key for SimAdapter"),
    ([*SIM, "+sim.extra=${missing_key}"], "sim.extra"),
    # tasks and data
    ([*GRPO, "data=chat_sample"], "data=chat_sample: task=grpo needs a math (question/answer) data set, got chat "
                                  "data; choose data=arithmetic, data=gsm8k, data=gsm8k_local, data=gsm8k_sample"),
    ([*GRPO, "grpo.advantage_estimator=ppo"],
     "grpo.advantage_estimator: unknown advantage estimator 'ppo'; valid: grpo, reinforce, rloo"),
    ([*GRPO, "+grpo.rewards.speed=1.0"], "grpo.rewards: speed is not a reward; give {name: weight} with names from"),
    ([*GRPO, "parallel.cp=2"], "parallel.cp: 2; backend=maxtext has no context parallelism (use cp=1)"),
    (["task=dpo", "dpo.loss_type=kto"], "dpo.loss_type: expected one of ['sigmoid', 'ipo', 'hinge', 'robust'], got 'kto'"),
]


@pytest.mark.parametrize("overrides,expected", BAD_INPUTS, ids=[" ".join(o[-1:]) for o, _ in BAD_INPUTS])
def test_bad_input_is_one_clear_line(overrides, expected, tmp_path):
    proc = run_cli([*overrides, f"hydra.run.dir={tmp_path}/run", f"hydra.sweep.dir={tmp_path}/sweep"])
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and expected in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_debug_flag_shows_the_traceback(tmp_path):
    proc = run_cli([*SIM, "parallel.tp=two", "debug=true", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2 and "Traceback" in proc.stderr


def test_crucible_debug_shows_the_traceback_of_an_error_the_run_finds(tmp_path):
    """CRUCIBLE_DEBUG=1 was ignored for errors found once the run started (the runtime passed debug=false on), so
    it showed no traceback where debug=true did; without either, the one line alone."""
    args = [*SIM, "sim.batch=0", f"hydra.run.dir={tmp_path}"]
    proc = run_cli(args, env={"CRUCIBLE_DEBUG": "1"})
    assert proc.returncode == 2 and "Traceback" in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == "error: sim.batch: 0 is out of range; valid: >= 1"
    proc = run_cli(args, env={"CRUCIBLE_DEBUG": "0"})
    assert proc.returncode == 2 and proc.stderr.splitlines() == ["error: sim.batch: 0 is out of range; valid: >= 1"]


def test_a_bad_data_line_names_the_file_and_line_before_any_model(tmp_path):
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    good = '{"question": "What is 1 + 1?", "answer": "1 + 1 = 2\\n#### 2"}'
    (folder / "train.jsonl").write_text(f"{good}\n{{\"question\": \"no answer\"}}\n")
    (folder / "test.jsonl").write_text(f"{good}\n")
    # a hub model that is not here: the data error must come first, before the model is looked up
    proc = run_cli([*GRPO, "model=qwen2_5_0_5b_instruct", "data=gsm8k_local", f"data.path={folder}",
                    f"hydra.run.dir={tmp_path}/run"])
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"error: {folder}/train.jsonl:2: missing or non-string field(s) ['answer']; each record needs "
                     "'question' and 'answer'"], proc.stderr


def test_headline_command_offline_is_one_line_naming_the_ways_out(tmp_path):
    """`python run.py backend=maxtext task=grpo` composes Qwen2.5-0.5B-Instruct + GSM8K; with the hub out of
    reach and an empty cache it stops before anything heavy, naming the hub id and the ways out."""
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1"}
    proc = run_cli(["backend=maxtext", "task=grpo", "hardware=cpu", f"hydra.run.dir={tmp_path}/run"], env=offline)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for part in ("model.hub_id=Qwen/Qwen2.5-0.5B-Instruct", "model.path=DIR", "model.random_init=true",
                 "data=gsm8k_sample"):
        assert part in lines[0], lines[0]


@pytest.mark.parametrize("args", [["recipe=grpo_gsm8k_cpu", "data=gsm8k"],
                                  ["recipe=sft_torch_cpu", "data.source=hub", "data.path=org/chat"]])
def test_a_hub_data_set_out_of_reach_is_one_line_naming_the_ways_out(args, tmp_path):
    """Was about 25 s of retries with 22 warning lines before the error. The hub here is a closed local port:
    nothing leaves the machine."""
    unreachable = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
                   "HF_DATASETS_OFFLINE": "0"}
    proc = run_cli([*args, f"hydra.run.dir={tmp_path}/run"], env=unreachable)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: data.path: ") and "cannot reach the hub at http://127.0.0.1:9" in lines[0]
    assert "data.source=local" in lines[0] or "data=gsm8k_local" in lines[0]
    assert "HF_HUB_OFFLINE=1" in lines[0]
