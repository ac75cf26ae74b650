"""The GEMM grid (sims/benchmarks/gemm_grid.py) leaves the accuracy runs' held-out shapes out and writes records
that a table is fitted from as GEMM shapes of no IR node."""

import json
import random
import subprocess
import sys

from sims_helpers import REPO, hardware

from sims.benchmarks.gemm_grid import MAX_FLOPS, ROWS, SIZES, TINY_ROWS, TINY_SIZES, record, shapes
from sims.calibration.fit import fit_table

HELD_OUT_SIZES = {3584, 14336, 18944, 152064}  # Llama-3.1-8B's and Qwen2.5-7B's widths (sims.benchmarks.accuracy)
HELD_OUT_ROWS = {16, 32, 256, 512, 2048}


def test_grid_leaves_the_held_out_shapes_out():
    grid = shapes(SIZES, ROWS)
    assert not {n for _, n, _ in grid} & HELD_OUT_SIZES and not {k for *_, k in grid} & HELD_OUT_SIZES
    assert not {m for m, *_ in grid} & HELD_OUT_ROWS
    assert all(2 * m * n * k <= MAX_FLOPS for m, n, k in grid)
    assert grid == sorted(grid, key=lambda s: s[0] * s[1] * s[2]) and len(set(grid)) == len(grid)  # smallest first
    assert (1, 4096, 16384) in grid and (16384, 24576, 24576) not in grid


def test_a_tiny_shuffled_run_on_the_cpu_fits_into_a_table(tmp_path):
    out = tmp_path / "grid.json"
    done = subprocess.run([sys.executable, "-m", "sims.benchmarks.gemm_grid", "--tiny", "--repeats", "2", "--shuffle",
                           "3", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    records = json.loads(out.read_text())
    order = shapes(TINY_SIZES, TINY_ROWS)
    random.Random(3).shuffle(order)  # --shuffle SEED: the seeded order, not smallest first
    assert [(r["m"], r["n"], r["k"]) for r in records] == order != shapes(TINY_SIZES, TINY_ROWS)
    assert all(r["time_us"] > 0 for r in records)
    table = fit_table(records, hardware("h100"), stack="transformers")
    assert {(g.m, g.n, g.k) for g in table.gemm_measurements} == {(r["m"], r["n"], r["k"]) for r in records}
    assert not table.ops and not table.op_measurements


def test_a_record_counts_bf16_bytes_and_flops():
    r = record(8, 4096, 1024, 10.0, 0.01, "cuda_graph")
    assert r["flops"] == 2 * 8 * 4096 * 1024
    assert r["bytes"] == 2 * (8 * 1024 + 4096 * 1024 + 8 * 4096)


def test_a_models_node_record_wins_over_a_plain_gemm_of_its_shape():
    """transformers times its k/v node as two GEMMs of half the width, recorded at the node's shape: a plain GEMM of
    that shape is another kernel, so it must not enter the shape's median; elsewhere the plain GEMMs count."""
    node = {**record(8, 1024, 2048, 11.6, 0.01, "cuda_graph"), "benchmark": "kv_proj", "op": "kv_proj"}
    plain_same, plain_other = record(8, 1024, 2048, 6.0, 0.01, "cuda_graph"), record(8, 2048, 2048, 7.0, 0.01, "x")
    table = fit_table([node, plain_same, plain_other], hardware("h200"), stack="transformers")
    assert sorted((g.m, g.n, g.k, g.time_us) for g in table.gemm_measurements) == [(8, 1024, 2048, 11.6),
                                                                                (8, 2048, 2048, 7.0)]
