"""sims/benchmarks/speed_compare.py's in-order first passes (the speed benchmark's own measure, sweeps in a given order)."""

import argparse

import pytest

import sims.benchmarks.speed as speed
from sims.benchmarks.speed_compare import _sweep_name, in_order


def test_in_order_measures_each_named_sweep_with_its_own_workload_in_the_order_given(monkeypatch, capsys):
    measured = []

    def record(hf_config, hardware, workload, seconds, per_layout=False):
        measured.append((hf_config["num_hidden_layers"], workload["mode"], hardware["nodes"], seconds))
        return 1e-5, 0, 0.0

    monkeypatch.setattr(speed, "measure", record)
    in_order([("qwen3_30b_a3b", "train"), ("qwen3_8b", "decode")], seconds=0.3)
    assert measured == [(48, "train", 2, 0.3), (36, "decode", 2, 0.3)]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["qwen3_30b_a3b", "train"], ["qwen3_8b", "decode"]]
    assert "10.0 us/config" in lines[0] and "100,000 configs/s" in lines[0]


def test_in_order_times_a_real_first_pass(capsys):
    in_order([("qwen3_8b", "decode")], seconds=0.0)
    model, mode, *_, rate, unit = capsys.readouterr().out.split()
    assert (model, mode, unit) == ("qwen3_8b", "decode", "configs/s") and float(rate.replace(",", "")) > 0


def test_a_sweep_name_outside_the_benchmark_names_the_valid_ones():
    assert _sweep_name("deepseek_v3:train") == ("deepseek_v3", "train")
    for bad in ("qwen3_8b:pre", "llama:decode", "qwen3_8b"):
        with pytest.raises(argparse.ArgumentTypeError, match="qwen3_8b, qwen3_30b_a3b.*prefill, decode, train"):
            _sweep_name(bad)
