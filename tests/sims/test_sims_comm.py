"""Collectives: latency + bus bytes / bus bandwidth, measured per group size or built in."""

import json

import pytest
from sims_helpers import hardware, model_config

from sims import simulate
from sims.calibration.fit import fit_collectives
from sims.comm import collective_s
from sims.hardware import hardware_spec

FITS = [
    {"collective": "all_reduce", "group": 2, "link": "intra_node", "latency_us": 10.0, "bus_gb_s": 300.0},
    {"collective": "all_reduce", "group": 4, "link": "intra_node", "latency_us": 18.0, "bus_gb_s": 340.0},
    {"collective": "all_to_all", "group": 2, "link": "intra_node", "latency_us": 15.0, "bus_gb_s": 200.0},
]


def spec_with(tmp_path, fits, **overrides):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"collectives": fits}))
    return hardware_spec(hardware("h100", efficiency_table=str(path), **overrides))


def test_built_in_model_uses_link_bandwidth_and_efficiency():
    hw = hardware_spec(hardware("h100", efficiency_table=None, nodes=2))  # links 0.75 / 10 us intra, 0.80 / 20 us inter
    assert collective_s("all_reduce", 1e9, 8, 8, hw) == pytest.approx(10e-6 + 2 * 7 / 8 * 1e9 / (450e9 * 0.75))
    assert collective_s("all_gather", 1e9, 2, 16, hw) == pytest.approx(20e-6 + 0.5 * 1e9 / (50e9 * 0.80))
    assert collective_s("send_recv", 1e6, 2, 2, hw) == pytest.approx(10e-6 + 1e6 / (450e9 * 0.75))
    assert collective_s("all_reduce", 1e9, 1, 1, hw) == 0.0


def test_measured_fits_replace_the_built_in_model(tmp_path):
    hw = spec_with(tmp_path, FITS)
    assert collective_s("all_reduce", 1e8, 2, 2, hw) == pytest.approx(10e-6 + 1e8 / 300e9)
    assert collective_s("all_reduce", 1e8, 4, 4, hw) == pytest.approx(18e-6 + 1.5 * 1e8 / 340e9)
    # 8 was not measured: the nearest group's bus bandwidth, latency scaled by ring steps (7 / 3)
    assert collective_s("all_reduce", 1e8, 8, 8, hw) == pytest.approx(18e-6 * 7 / 3 + 1.75 * 1e8 / 340e9)
    # all_gather was not measured: built in
    built_in = hardware_spec(hardware("h100", efficiency_table=None))
    assert collective_s("all_gather", 1e8, 2, 2, hw) == collective_s("all_gather", 1e8, 2, 2, built_in)


def test_fit_recovers_latency_and_bus_bandwidth_and_takes_medians():
    truth = {"all_reduce": (12e-6, 360e9), "all_to_all": (20e-6, 150e9)}
    measured = []
    for kind, (latency, bus) in truth.items():
        factor = 2 * 3 / 4 if kind == "all_reduce" else 3 / 4
        for size in (1e3, 1e5, 1e7, 1e9):
            t = latency + factor * size / bus
            measured += [{"collective": kind, "group": 4, "bytes": size, "time_us": x * 1e6} for x in (t, t, 5 * t)]
    fits = {f.collective: f for f in fit_collectives(measured, hardware_spec(hardware("h100")))}
    for kind, (latency, bus) in truth.items():
        assert fits[kind].latency_us == pytest.approx(latency * 1e6, rel=1e-6)
        assert fits[kind].bus_gb_s == pytest.approx(bus / 1e9, rel=1e-6)
        assert (fits[kind].group, fits[kind].link) == (4, "intra_node")


def test_tensor_and_expert_parallel_collectives_follow_the_table(tmp_path):
    cfg, decode = model_config("qwen3_30b_a3b"), {"mode": "decode", "batch": 8, "context_len": 1024}
    slow = [dict(f, bus_gb_s=f["bus_gb_s"] / 10, latency_us=f["latency_us"] * 10) for f in FITS]
    path = tmp_path / "slow.json"
    path.write_text(json.dumps({"collectives": slow}))
    built_in = simulate(cfg, hardware("h100", efficiency_table=None), {"tp": 2, "ep": 2}, decode)
    measured = simulate(cfg, hardware("h100", efficiency_table=str(path)), {"tp": 2, "ep": 2}, decode)
    rows = {r["name"]: r for r in measured.breakdown_rows()}
    base = {r["name"]: r for r in built_in.breakdown_rows()}
    attn_bytes = 8 * 2048 * 2  # one token per sequence, hidden 2048, bf16
    assert rows["attn_all_reduce"]["time_s"] == pytest.approx(48 * (100e-6 + attn_bytes / 30e9))
    assert rows["moe_dispatch"]["time_s"] > base["moe_dispatch"]["time_s"]
    assert rows["mlp_gate_up_proj" if "mlp_gate_up_proj" in rows else "router"]["time_s"] == pytest.approx(
        base["mlp_gate_up_proj" if "mlp_gate_up_proj" in base else "router"]["time_s"])
