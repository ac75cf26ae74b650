import csv

from sims_helpers import hardware, model_config

from sims import simulate
from sims.report import plot_sweep, write_breakdown


def test_write_breakdown_csv_and_markdown(tmp_path):
    result = simulate(model_config("qwen3_8b"), hardware("h100"), {"tp": 2}, {"mode": "decode", "context_len": 512})
    rows = result.breakdown_rows()
    write_breakdown(rows, tmp_path / "ops.csv", tmp_path / "ops.md")
    with open(tmp_path / "ops.csv") as handle:
        back = list(csv.DictReader(handle))
    assert [r["name"] for r in back] == [r["name"] for r in rows]
    assert float(back[0]["time_s"]) == rows[0]["time_s"]
    lines = (tmp_path / "ops.md").read_text().splitlines()
    assert lines[0].startswith("| name | op_type | count | flops | bytes | time_s | bound | time_% |")
    assert len(lines) == len(rows) + 2
    shares = [float(line.split("|")[-2]) for line in lines[2:]]
    assert abs(sum(shares) - 100) < 0.1 * len(rows)


def sweep_rows():
    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100")
    rows = []
    for tp, ep in ((1, 1), (2, 2), (4, 4), (8, 8), (3, 1)):
        summary = simulate(
            cfg, hw, {"tp": tp, "ep": ep}, {"mode": "decode", "batch": 64, "context_len": 32768}
        ).summary()
        rows.append({"parallel.tp": str(tp), "parallel.ep": str(ep), "parallel.pp": "1", **{k: str(v) for k, v in summary.items()}})
    return rows


def test_plot_sweep_marks_invalid_and_oversized_layouts(tmp_path):
    rows = sweep_rows()
    assert rows[-1]["status"] == "invalid" and rows[0]["fits"] == "False"  # tp=3; tp=1 runs out of memory
    out = plot_sweep(rows, tmp_path / "sweep.png", ["parallel.tp", "parallel.ep"])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
