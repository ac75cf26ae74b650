"""sims/benchmarks/speed_order.py: the speed benchmark's own first pass of named sweeps, in the order given."""

import argparse

import pytest

import sims.benchmarks.speed_order as speed_order
from sims.benchmarks.speed_order import first_passes, sweep_name
from sims.builders import graph_and_counts
from sims.cache import clear_caches
from sims.op_columns import _COLUMNS


def test_each_named_sweep_is_measured_with_its_own_workload_in_the_order_given(monkeypatch):
    measured = []

    def record(hf_config, hardware, workload, seconds, per_layout=False):
        measured.append((hf_config["num_hidden_layers"], workload["mode"], hardware["nodes"], seconds))
        return 1e-5, 0, 0.0

    monkeypatch.setattr(speed_order, "measure", record)
    lines = first_passes([("qwen3_30b_a3b", "train"), ("qwen3_8b", "decode")], seconds=0.3)
    assert measured == [(48, "train", 2, 0.3), (36, "decode", 2, 0.3)]
    assert [line.split()[:2] for line in lines] == [["qwen3_30b_a3b", "train"], ["qwen3_8b", "decode"]]
    assert "10.0 us/config" in lines[0] and "100,000 configs/s" in lines[0] and "setup" not in lines[0]


def test_prebuilt_builds_the_graphs_columns_and_work_before_its_first_pass(monkeypatch):
    clear_caches()
    graph, _ = graph_and_counts(speed_order.yaml.safe_load(
        (speed_order.REPO / "conf/model/qwen3_8b.yaml").read_text())["hf_config"], "prefill")
    built = []
    monkeypatch.setattr(speed_order, "measure", lambda *args: built.append(_COLUMNS.peek(graph, None)) or (1e-5, 0, 0.0))
    (line,) = first_passes([("qwen3_8b", "prefill")], seconds=0.0, prebuilt=True)
    assert built[0] is not None and line.split()[-3] == "setup" and float(line.split()[-2]) > 0


def test_a_real_first_pass_is_timed():
    (line,) = first_passes([("qwen3_8b", "decode")], seconds=0.0)
    model, mode, *_, rate, unit = line.split()
    assert (model, mode, unit) == ("qwen3_8b", "decode", "configs/s") and float(rate.replace(",", "")) > 0


def test_a_sweep_name_outside_the_benchmark_names_the_valid_ones():
    assert sweep_name("deepseek_v3:train") == ("deepseek_v3", "train")
    for bad in ("qwen3_8b:pre", "llama:decode", "qwen3_8b"):
        with pytest.raises(argparse.ArgumentTypeError, match="qwen3_8b, qwen3_30b_a3b.*prefill, decode, train"):
            sweep_name(bad)
