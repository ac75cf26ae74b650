"""Session 26's 2 x H200 collectives against session 9's file and against the fit the shipped table holds.

    PYTHONPATH=. python sims/benchmarks/results/h200x2_2026-11-29_s26/compare_collectives.py
"""

import json
import statistics
from pathlib import Path

from framework.core.paths import load_conf
from sims.comm import collective_s
from sims.hardware import hardware_spec

NEW = Path(__file__).parent / "coll" / "collectives_2.json"
OLD = Path("sims/benchmarks/results/h200x2_2026-11-26_s9/coll/collectives_2.json")


def times(path: Path) -> dict:
    return {(m["collective"], m["bytes"]): m["time_us"] for m in json.loads(path.read_text())["measurements"]
            if m["group"] == 2}


if __name__ == "__main__":
    hw = hardware_spec(load_conf("hardware", "h200")["hardware"], stack="torch_fused")
    new, old = times(NEW), times(OLD)
    print("| collective | new / old median (range) | fit vs new: median / worst | fit vs old (in-sample) |")
    print("|---|---|---|---|")
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"):
        keys = sorted(k for k in new if k[0] == kind and k in old)
        ratios = [new[k] / old[k] for k in keys]
        fit = {k: collective_s(kind, k[1], 2, 2, hw) * 1e6 for k in keys}
        off_new = [abs(fit[k] / new[k] - 1) for k in keys]
        off_old = [abs(fit[k] / old[k] - 1) for k in keys]
        print(f"| {kind} | {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{statistics.median(off_new):.1%} / {max(off_new):.1%} | "
              f"{statistics.median(off_old):.1%} / {max(off_old):.1%} |")
