"""A shared-prefix decode (workload shared_prefix, sims/shared_prefix.py): its attention costed as the two kernel
calls and the merge that run, its cache the prompt once per group, and the task=sim node that sweeps it."""

from __future__ import annotations

import re

import pytest

from framework.backends.sim.adapter import SimAdapter
from framework.backends.sim.trainers import simulate_job
from framework.core.errors import ConfigError
from framework.core.paths import load_conf
from sims import simulate
from sims.api import predict_op, simulate_many
from sims.cache import clear_caches
from tests.conftest import compose_config, run_cli

PROMPTS, SAMPLES, PROMPT, NEW = 16, 8, 1024, 128
ROWS = PROMPTS * SAMPLES


def _model_and_h200():
    return load_conf("model", "qwen2_5_0_5b_instruct")["hf_config"], load_conf("hardware", "h200")["hardware"]


def _decode(batch: int, context: int, **extra) -> dict:
    return {"mode": "decode", "batch": batch, "context_len": context, **extra}


def _attention_s(hf: dict, hardware: dict, workload: dict) -> float:
    rows = simulate(hf, hardware, {"tp": 1}, workload, stack="xla").rows
    return next(row["time_s"] for row in rows if row["name"] == "attention")


def test_the_shared_attention_is_a_call_over_each_prompt_for_its_group_one_over_each_rows_tokens_and_a_merge():
    """Each layer: the decode kernel over PROMPTS prompts' K/V with SAMPLES x heads queries each (a model with that
    many query heads, head_dim kept, decoding PROMPTS rows over the prompt), the same kernel over ROWS rows' own
    NEW tokens, and the f32 merge: each call at its own point of the table's batch x KV surface."""
    hf, hardware = _model_and_h200()
    shared = _attention_s(hf, hardware, _decode(ROWS, PROMPT + NEW, seq_len=PROMPT, shared_prefix=SAMPLES))
    grouped = {**hf, "num_attention_heads": hf["num_attention_heads"] * SAMPLES,
               "head_dim": hf["hidden_size"] // hf["num_attention_heads"]}
    prefix_call = _attention_s(grouped, hardware, _decode(PROMPTS, PROMPT))
    suffix_call = _attention_s(hf, hardware, _decode(ROWS, NEW))
    merge = shared - prefix_call - suffix_call
    layers = hf["num_hidden_layers"]
    assert 0 < merge < 0.1 * shared and merge / layers > 1e-6  # an elementwise pass a layer, above a kernel floor
    repeated = _attention_s(hf, hardware, _decode(ROWS, PROMPT + NEW))
    shortened = _attention_s(hf, hardware, _decode(ROWS, PROMPT // SAMPLES + NEW))
    assert shortened < shared < repeated  # the old preflight's shortened context predicted too much gain


def test_the_cache_holds_the_prompt_once_per_group_and_each_rows_own_tokens():
    hf, hardware = _model_and_h200()
    cache = {flag: simulate(hf, hardware, {"tp": 1}, _decode(ROWS, PROMPT + NEW, seq_len=PROMPT, shared_prefix=flag),
                            stack="xla").memory_breakdown_gb["kv_cache"] for flag in (1, SAMPLES)}
    assert cache[SAMPLES] / cache[1] == pytest.approx((PROMPTS * PROMPT + ROWS * NEW) / (ROWS * (PROMPT + NEW)))


def test_a_sweep_costs_shared_prefix_decodes_as_each_alone():
    """simulate_many (vectorised over layouts) and simulate (one layout, caches cleared) agree bit for bit."""
    hf, hardware = _model_and_h200()
    layouts = [{"tp": 1}, {"tp": 2}, {"dp": 2}]
    cases = [(layout, _decode(ROWS, PROMPT + NEW, seq_len=PROMPT, shared_prefix=n)) for layout in layouts
             for n in (1, 2, SAMPLES)]
    alone = []
    for layout, workload in cases:
        clear_caches()
        result = simulate(hf, hardware, layout, workload, stack="xla")
        alone.append((result.summary(), result.breakdown_rows()))
    clear_caches()
    together = simulate_many(hf, hardware, [c[0] for c in cases], [c[1] for c in cases], stack="xla")
    assert [(r.summary(), r.breakdown_rows()) for r in together] == alone
    assert len({summary["latency_s"] for summary, _ in alone}) == len(cases)


@pytest.mark.parametrize("hardware_name", ["h100", "h200"])
@pytest.mark.parametrize("prompts, samples, prompt, new", [(PROMPTS, SAMPLES, PROMPT, NEW), (2, 8, 256, 32)])
def test_every_ops_bound_is_predict_ops_in_a_step_and_alone(hardware_name, prompts, samples, prompt, new):
    """A step's rows (sims/vector_cost.py) label each op as predict_op does (sims/shared_prefix.py's cascade_cost for
    the shared attention: the bound of its longest call); the small decode's calls are at their kernel floors."""
    hf, hardware = _model_and_h200()[0], load_conf("hardware", hardware_name)["hardware"]
    workload = _decode(prompts * samples, prompt + new, seq_len=prompt, shared_prefix=samples)
    for layout in ({"tp": 1}, {"tp": 2}):
        rows = simulate(hf, hardware, layout, workload, stack="xla").breakdown_rows()
        bounds = {row["name"]: row["bound"] for row in rows if row["op_type"] != "loss"}
        assert bounds == {name: predict_op(hf, hardware, workload, name, layout, stack="xla")["bound"]
                          for name in bounds}
        assert bounds["attention"] == ("floor" if prompt == 256 else "memory")


def test_tensor_parallel_splits_the_merge_and_both_calls_heads():
    hf, hardware = _model_and_h200()
    workload = _decode(ROWS, PROMPT + NEW, seq_len=PROMPT, shared_prefix=SAMPLES)
    flops = {tp: next(row["flops"] for row in simulate(hf, hardware, {"tp": tp}, workload, stack="xla").breakdown_rows()
                      if row["op_type"] == "attention") for tp in (1, 2)}
    assert flops[2] == pytest.approx(flops[1] / 2, rel=1e-9)


VALID = ("valid: 1 (no shared prefix), or > 1 with workload.mode decode and workload.seq_len (the shared prompt) below "
         "workload.context_len (the rows' own tokens follow it)")


@pytest.mark.parametrize("workload, message", [
    (_decode(ROWS, 512, seq_len=512, shared_prefix=SAMPLES),
     f"workload.shared_prefix is 8 with workload.seq_len 512 and workload.context_len 512; {VALID}"),
    (_decode(ROWS, 512, shared_prefix=SAMPLES), "workload.shared_prefix is 8 with workload.seq_len None"),
    ({"mode": "prefill", "batch": ROWS, "seq_len": 512, "shared_prefix": SAMPLES},
     f"workload.shared_prefix is 8 with workload.mode prefill; {VALID}"),
    (_decode(ROWS, 512, seq_len=256, shared_prefix=0), "workload.shared_prefix is 0"),
])
def test_a_shared_prefix_outside_a_decode_after_its_prompt_is_a_one_line_error(workload, message):
    hf, hardware = _model_and_h200()
    with pytest.raises(ConfigError, match=re.escape(message)):
        simulate(hf, hardware, {"tp": 1}, workload, stack="xla")


def test_a_replica_holds_whole_groups():
    hf, hardware = _model_and_h200()
    result = simulate(hf, hardware, {"dp": 4}, _decode(16, 512, seq_len=256, shared_prefix=8), stack="xla")
    assert result.status == "invalid" and "dp*shared_prefix=32" in result.reason


SIM_DECODE = ["task=sim", "backend=sim", "model=qwen2_5_0_5b_instruct", "hardware=h200", "sim.stack=xla",
              "sim.mode=decode", "sim.batch=128", "sim.seq_len=2048", "sim.context_len=2176"]
SIM_VALID = ("valid: 1 (no shared prefix), or > 1 with sim.mode decode and sim.seq_len (the shared prompt) below "
             "sim.context_len (the rows' own tokens follow it)")


def test_task_sim_sweeps_the_shared_prefix():
    """sim.shared_prefix reaches the simulator's workload: the decode it predicts holds a smaller cache."""
    summaries = [simulate_job(SimAdapter().convert_config(compose_config([*SIM_DECODE, f"sim.shared_prefix={n}"])))[0]
                 for n in (1, 8)]
    assert summaries[1]["memory_breakdown_gb"]["kv_cache"] < summaries[0]["memory_breakdown_gb"]["kv_cache"] / 3
    assert summaries[1]["latency_s"] != summaries[0]["latency_s"]


@pytest.mark.parametrize("overrides, message", [
    (["sim.shared_prefix=8", "sim.seq_len=2176"],
     f"sim.shared_prefix is 8 with sim.seq_len 2176 and sim.context_len 2176; {SIM_VALID}"),
    (["sim.shared_prefix=8", "sim.mode=prefill"], f"sim.shared_prefix is 8 with sim.mode prefill; {SIM_VALID}"),
    # a batch no group divides: still the error (its batch_problem row would advise a multiple of 3 for a prefill)
    (["sim.shared_prefix=3", "sim.mode=prefill"], f"sim.shared_prefix is 3 with sim.mode prefill; {SIM_VALID}"),
    (["sim.context_len=0"], "sim.context_len: 0 is out of range; valid: >= 1"),  # the task schema, as the simulator
])
def test_a_bad_sim_value_is_one_line_naming_the_key_the_user_typed(overrides, message):
    """The sim task's workload errors name sim.* (the keys of conf/task/sim.yaml), not the simulator's workload.*."""
    with pytest.raises(ConfigError) as error:
        simulate_job(SimAdapter().convert_config(compose_config([*SIM_DECODE, *overrides])))
    assert str(error.value) == message


def test_the_command_line_names_sim_shared_prefix(tmp_path):
    proc = run_cli([*SIM_DECODE, "sim.shared_prefix=8", "sim.mode=prefill", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"error: sim.shared_prefix is 8 with sim.mode prefill; {SIM_VALID}"]
