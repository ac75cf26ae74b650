"""The layouts of recipe=sim_sweep measured on this node: tp x ep decode of a Qwen3-30B-A3B-shaped MoE (issue 13).

    torchrun --nproc_per_node 4 -m sims.benchmarks.layouts --out layouts_4gpu.json            # 9 of 16 layouts
    torchrun --nproc_per_node 8 -m sims.benchmarks.layouts --out layouts_8gpu.json            # all 16
    torchrun --nproc_per_node 2 -m sims.benchmarks.layouts --tiny --out /tmp/layouts.json     # CPU, gloo, seconds
    python -m sims.benchmarks.layouts --repredict layouts_4gpu.json --out DIR/layouts.json     # no GPU: predict again

Predictions are for the card the script runs on (its CUDA device name -> conf/hardware/<name>.yaml, as
hardware=auto picks it; --hardware overrides; the CPU check keeps the recipe's). --repredict redoes the
predictions of a saved report for the card it names (or --hardware) and its errors and summary, keeping
every measurement.

Each (tp, ep) of the recipe's sweep fills the world as the sweep fills its node: dp = world / tp replicas
of `sim.batch` sequences each, decoding one token over `sim.context_len` tokens of KV cache, with the
experts spread over ep of the ranks; a layout that cannot split this world (tp or ep larger than it)
is recorded as skipped. Only `--layers K` decoder layers are built (plus embedding and head); the
simulator predicts the same model with num_hidden_layers = K, so measured and predicted describe the
same step. Full-depth figures scale the layers' share: step_K + (L - K) * (time of the K layers) / K,
against the simulator's prediction at the model's own depth.

Timing: CUDA-graph replays between CUDA events (GPU time, as the simulator predicts it), median of
--repeats after warm-up, the slowest rank's median; eager steps (host included) are recorded beside.
On the CPU: perf_counter around eager steps. The replica-0 logits of every layout are compared with the
first layout's (the same random weights, sliced): the parallel decode is checked on the node it times.
The decode itself is sims/benchmarks/layouts_decode.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError
from framework.core.hardware import GPU_FILES
from sims import simulate_many
from sims.hardware import read_hardware_file
from sims.workload import layout_from_parallel

REPO = Path(__file__).resolve().parents[2]
TINY = {"hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
        "num_experts_per_tok": 2, "moe_intermediate_size": 32, "vocab_size": 256, "intermediate_size": 128}
# 8 sequences: with tp <= 4 every ep group's copies still cover the 8 experts evenly (balanced, as at full size)
TINY_WORKLOAD = {"batch": 8, "context_len": 32, "dtype": "float32"}


def sweep(recipe: Path) -> dict:
    """The recipe's model, hardware, workload (conf/task/sim.yaml's `sim` under the recipe's) and (tp, ep) grid."""
    spec = yaml.safe_load(recipe.read_text())
    groups = {}
    for entry in spec.get("defaults", []):
        for key, value in (entry.items() if isinstance(entry, dict) else ()):
            groups[key.replace("override", "").strip(" /")] = value
    task = yaml.safe_load((REPO / "conf/task/sim.yaml").read_text())["sim"]
    params = spec["hydra"]["sweeper"]["params"]
    grid = [(tp, ep) for tp in _ints(params["parallel.tp"]) for ep in _ints(params["parallel.ep"])]
    return {"model": groups["model"], "hardware": groups["hardware"], "sim": {**task, **spec.get("sim", {})},
            "parallel": spec.get("parallel", {}), "grid": grid}


def _ints(values) -> list[int]:
    return [int(v) for v in str(values).split(",")]


def plan(spec: dict, hf_config: dict, hardware: dict, world: int, layers: int) -> list[dict]:
    """One row per (tp, ep): the layout on `world` devices, its predictions, or why it is skipped."""
    rows, pending, layouts, workloads = [], [], [], []  # pending: the rows whose layouts are simulated together
    for tp, ep in spec["grid"]:
        row = {"tp": tp, "ep": ep}
        parallel = {"dp": -1, "fsdp": 1, "pp": 1, "cp": 1, **spec["parallel"], "tp": tp, "ep": ep}
        try:
            layout, _ = layout_from_parallel(parallel, world)
        except ConfigError as exc:
            rows.append({**row, "status": "skipped", "reason": f"tp={tp} does not fit {world} devices ({exc})"})
            continue
        pending.append(len(rows))
        rows.append(row)
        layouts.append(layout)
        workloads.append({"mode": spec["sim"]["mode"], "batch": spec["sim"]["batch"] * layout["dp"],
                          "context_len": spec["sim"]["context_len"], "dtype": SHORT[spec["sim"]["dtype"]]})
    shorts = simulate_many({**hf_config, "num_hidden_layers": layers}, hardware, layouts, workloads)
    fulls = simulate_many(hf_config, hardware, layouts, workloads)
    for index, layout, short, full in zip(pending, layouts, shorts, fulls):
        row = rows[index]
        if short.status != "ok":
            rows[index] = {**row, "status": "skipped", "reason": short.reason}
            continue
        rows[index] = {**row, "status": "planned", "dp": layout["dp"], "devices": short.layout.devices,
                       "predicted_s": short.latency_s, "predicted_full_s": full.latency_s, "predicted_fits": full.fits}
    return rows


def card_hardware(card: str) -> str | None:
    """conf/hardware name of a device name ('NVIDIA H200' -> h200; framework.core.hardware's table), or None."""
    return next((option for needle, option in GPU_FILES if needle.lower() in card.lower()), None)


def repredict(saved: dict, hardware_name: str | None = None) -> dict:
    """A saved report predicted again for `hardware_name` (default: the card it was measured on)."""
    card = saved["environment"]["device"]
    name = hardware_name or card_hardware(card)
    if name is None:
        raise SystemExit(f"no conf/hardware file for {card!r}; pass --hardware NAME")
    spec = sweep(REPO / "recipes/sim_sweep.yaml")
    hf_config = yaml.safe_load((REPO / f"conf/model/{spec['model']}.yaml").read_text())["hf_config"]
    spec["sim"] = {**spec["sim"], "batch": saved["workload"]["batch_per_replica"],
                   "context_len": saved["workload"]["context_len"], "dtype": saved["workload"]["dtype"]}
    hardware = read_hardware_file(REPO / f"conf/hardware/{name}.yaml")
    predicted = {(r["tp"], r["ep"]): r for r in plan(spec, hf_config, hardware, saved["environment"]["devices"],
                                                      saved["layers_measured"])}
    rows = []
    for row in saved["layouts"]:
        if row["status"] == "measured":
            fresh = predicted[(row["tp"], row["ep"])]
            row = {**row, **{k: fresh[k] for k in ("predicted_s", "predicted_full_s", "predicted_fits")}}
            add_errors(row, spec["sim"]["batch"])
        rows.append(row)
    return {**saved, "hardware": name, "repredicted_from": saved["hardware"], "layouts": rows,
            "summary": summarise(rows)}


def add_errors(row: dict, batch: int) -> None:
    """Relative errors (predicted - measured) / measured and the throughput the sweep ranks layouts by."""
    row["error"] = (row["predicted_s"] - row["measured_s"]) / row["measured_s"]
    row["error_full"] = (row["predicted_full_s"] - row["measured_full_s"]) / row["measured_full_s"]
    tokens = batch * row["dp"]
    row["measured_tokens_per_s_per_device"] = tokens / row["measured_full_s"] / row["devices"]
    row["predicted_tokens_per_s_per_device"] = tokens / row["predicted_full_s"] / row["devices"]


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 2:
        return None
    ra, rb = ranks(a), ranks(b)
    mean = (len(a) + 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb))
    norm = (sum((x - mean) ** 2 for x in ra) * sum((y - mean) ** 2 for y in rb)) ** 0.5
    return cov / norm if norm else None


def summarise(rows: list[dict]) -> dict:
    done = [r for r in rows if r["status"] == "measured"]
    if not done:
        return {"measured": 0, "skipped": len(rows)}

    def name(row: dict) -> str:
        return f"tp{row['tp']}_ep{row['ep']}"

    def best(key: str, pick) -> str:
        return name(pick(done, key=lambda r: r[key]))

    summary = {
        "measured": len(done), "skipped": len(rows) - len(done),
        "median_abs_error": statistics.median(abs(r["error"]) for r in done),
        "median_abs_error_full": statistics.median(abs(r["error_full"]) for r in done),
        "spearman_step_time": spearman([r["measured_s"] for r in done], [r["predicted_s"] for r in done]),
        "spearman_throughput": spearman([r["measured_tokens_per_s_per_device"] for r in done],
                                        [r["predicted_tokens_per_s_per_device"] for r in done]),
        "fastest_step_measured": best("measured_s", min), "fastest_step_predicted": best("predicted_s", min),
        "best_throughput_measured": best("measured_tokens_per_s_per_device", max),
        "best_throughput_predicted": best("predicted_tokens_per_s_per_device", max),
        "max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in done),
    }
    summary["fastest_step_agrees"] = summary["fastest_step_measured"] == summary["fastest_step_predicted"]
    summary["best_throughput_agrees"] = summary["best_throughput_measured"] == summary["best_throughput_predicted"]
    return summary


# --- the decode's shapes and static routing (no torch: planning and its tests need none) ------------


@dataclass(frozen=True)
class Shapes:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int
    top_k: int
    expert_intermediate: int
    vocab: int
    layers: int
    eps: float
    rope_theta: float

    @classmethod
    def of(cls, hf: dict) -> "Shapes":
        return cls(hf["hidden_size"], hf["num_attention_heads"], hf["num_key_value_heads"], hf["head_dim"],
                   hf["num_experts"], hf["num_experts_per_tok"], hf["moe_intermediate_size"], hf["vocab_size"],
                   hf["num_hidden_layers"], hf["rms_norm_eps"], hf.get("rope_theta") or 1e6)


def expert_choice(token: int, top_k: int, experts: int) -> list[int]:
    """Balanced deterministic routing: a replica's tokens cycle through the experts k at a time."""
    return [(token * top_k + j) % experts for j in range(top_k)]


@dataclass
class RoutePlan:
    """Static dispatch of one rank's token copies (same every step, so it can be captured in a CUDA graph)."""

    tokens: tuple[int, int]  # [first, end) of the replica's tokens this rank routes
    choice: list[list[int]]  # experts of each local token
    send_rows: list[int]  # local token of each copy, copies ordered by (destination rank, expert)
    send_splits: list[int]
    unpermute: list[int]  # for copy (token, j) in token-major order: its position in the sorted send order
    recv_splits: list[int]
    recv_sort: list[int]  # received rows ordered by local expert
    expert_counts: list[int]  # rows per local expert


def route_plan(s: Shapes, tp: int, ep: int, rank: int, batch: int) -> RoutePlan:
    """Which copies global rank `rank` sends where and receives from whom. With ep > 1 the tp ranks of a
    replica split its tokens; routing depends only on a token's index in its replica, so every member
    of an ep group can work out what the others send without an exchange."""
    per_rank, ep_rank = s.experts // ep, rank % ep
    share = batch // tp if ep > 1 else batch

    def first_token(member: int) -> int:
        return (member % tp) * share if ep > 1 else 0

    def copies(member: int) -> list[tuple[int, int, int]]:  # (dest, expert, token-major index), sorted
        first = first_token(member)
        return sorted((e // per_rank, e, t * s.top_k + j)
                      for t in range(share) for j, e in enumerate(expert_choice(first + t, s.top_k, s.experts)))

    mine = copies(rank)
    position = {index: p for p, (_, _, index) in enumerate(mine)}
    received: list[int] = []  # expert of each received row, by source then in the source's order
    recv_splits = []
    for member in range(rank - ep_rank, rank - ep_rank + ep):  # an ep group: consecutive ranks
        rows = [e for dest, e, _ in copies(member) if dest == ep_rank]
        recv_splits.append(len(rows))
        received += rows
    counts = [0] * per_rank
    for e in received:
        counts[e - ep_rank * per_rank] += 1
    first = first_token(rank)
    return RoutePlan(
        tokens=(first, first + share),
        choice=[expert_choice(first + t, s.top_k, s.experts) for t in range(share)],
        send_rows=[index // s.top_k for _, _, index in mine],
        send_splits=[sum(1 for d, _, _ in mine if d == dest) for dest in range(ep)],
        unpermute=[position[i] for i in range(share * s.top_k)],
        recv_splits=recv_splits,
        recv_sort=sorted(range(len(received)), key=lambda r: (received[r], r)),
        expert_counts=counts,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON report")
    parser.add_argument("--recipe", default=str(REPO / "recipes/sim_sweep.yaml"))
    parser.add_argument("--layers", type=int, default=4, help="decoder layers built and predicted (default 4)")
    parser.add_argument("--hardware", help="conf/hardware/NAME.yaml for the predictions (default: the detected card's)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--eager", action="store_true", help="no CUDA graphs (if capture fails on this stack)")
    parser.add_argument("--only", help="comma-separated layouts to run, e.g. tp1_ep4,tp4_ep1")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes and workload, float32 (CPU check)")
    parser.add_argument("--repredict", metavar="REPORT", help="no measuring: predict a saved report again")
    args = parser.parse_args(argv)
    if args.repredict:
        report = repredict(json.loads(Path(args.repredict).read_text()), args.hardware)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
        print(json.dumps(report["summary"], indent=1))
        return
    from sims.benchmarks.layouts_run import run

    run(args)


if __name__ == "__main__":
    main()
