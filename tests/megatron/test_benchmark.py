"""The GPU benchmark script runs in its --tiny CPU mode and writes its JSON (slow: it trains three models)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.slow
def test_tiny_benchmark_writes_megatron_and_transformers_throughputs(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "framework.backends.megatron.benchmarks.pretrain_step", "--tiny",
                           "--out", str(out)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(out.read_text())
    assert set(record["results"]) == {"megatron_local_sdpa", "megatron_local", "transformers"}
    assert all(row["tokens_per_s"] > 0 and 0 < row["mfu"] < 1 for row in record["results"].values())
    expected = record["results"]["megatron_local"]["tokens_per_s"] / record["results"]["transformers"]["tokens_per_s"]
    assert record["ratio_vs_transformers"]["megatron_local"] == pytest.approx(expected)
    assert record["seq"] == 64 and record["versions"]["megatron_core"]
