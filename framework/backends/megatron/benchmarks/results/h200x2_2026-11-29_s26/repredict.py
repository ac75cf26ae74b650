"""Session 26's megatron steps against the preflight's prediction (sims.api.simulate, megatron_local stack), and
the SM clock through calls D and E. Run from the repository root on any machine:

    PYTHONPATH=. python framework/backends/megatron/benchmarks/results/h200x2_2026-11-29_s26/repredict.py
"""

import csv
import datetime
import json
import statistics
from pathlib import Path

from framework.core.paths import load_conf
from sims.api import simulate
from sims.stacks import stack_for_backend

HERE = Path(__file__).parent


def predicted_s(seq: int, global_batch: int, tp: int, dp: int) -> float:
    hf = load_conf("model", "llama3_2_1b")["hf_config"]
    workload = {"mode": "train", "batch": global_batch, "seq_len": seq, "microbatches": global_batch // (2 * dp),
                "dtype": "bf16", "zero": False}
    layout = {"tp": tp, "dp": dp, "pp": 1, "ep": 1}
    return simulate(hf, load_conf("hardware", "h200")["hardware"], layout, workload,
                    stack=stack_for_backend("megatron")).summary()["latency_s"]


def steps() -> list[tuple]:
    """(what, seq, global batch, tp, dp, measured s) of every run."""
    rows = []
    for name in ("meg_1gpu", "meg_dp2", "meg_tp2"):  # the recipe as typed (run.py), global batch 16
        metrics = json.loads((HERE / "call_a" / name / "summary.json").read_text())["metrics"]
        tp, dp = {"meg_1gpu": (1, 1), "meg_dp2": (1, 2), "meg_tp2": (2, 1)}[name]
        rows.append((f"recipe {name}", 2048, 16, tp, dp, metrics["measured_step_s"]))
        assert abs(metrics["preflight_predicted_step_s"] - predicted_s(2048, 16, tp, dp)) < 1e-9
    for folder in ("call_c", "call_d"):  # pretrain_step
        for path in sorted((HERE / folder).glob("*.json")):
            if path.name.startswith("probe"):
                continue
            report = json.loads(path.read_text())
            layout = report["layout"]
            rows.append((f"{folder} {path.stem}", report["seq"], report["global_batch"], layout["tp"], layout["dp"],
                         report["results"]["megatron_local_sdpa"]["step_s"]))
    return rows


def clock(folder: str, start: str, end: str) -> str:
    """Median SM clock and power over the samples drawing above 300 W between two time stamps of the call."""
    def when(text):
        return datetime.datetime.strptime(text.strip()[:26], "%Y/%m/%d %H:%M:%S.%f")
    low, high = (when((HERE / folder / name).read_text()) for name in (start, end))
    rows = csv.reader(open(HERE / folder / "smi.csv"))
    samples = [(when(r[0]), float(r[1].split()[0]), float(r[2].split()[0])) for r in rows
               if len(r) > 2 and r[2].strip()[:1].isdigit()]
    busy = [s for s in samples if low <= s[0] <= high and s[2] > 300]
    mhz, watts = statistics.median(s[1] for s in busy), statistics.median(s[2] for s in busy)
    return f"{folder}: {len(busy)} samples above 300 W, SM clock median {mhz:.0f} MHz, power median {watts:.0f} W"


if __name__ == "__main__":
    print("| run | seq | global batch | tp | dp | micro-batches per rank | measured s | predicted s | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for what, seq, batch, tp, dp, measured in steps():
        predicted = predicted_s(seq, batch, tp, dp)
        print(f"| {what} | {seq} | {batch} | {tp} | {dp} | {batch // (2 * dp)} | {measured:.4f} | {predicted:.4f} | "
              f"{(predicted - measured) / measured:+.1%} |")
    print(clock("call_d", "t_meg_start", "t_meg_end"))
    print(clock("call_e", "t_start", "t_end"))
