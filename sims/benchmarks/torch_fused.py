"""Accuracy for the `torch_fused` stack, on one GPU or tensor-parallel over several.

    python -m sims.benchmarks.torch_fused --out $OUT/fused_tp1                 # 1 GPU, about 2 minutes
    torchrun --nproc_per_node 2 -m sims.benchmarks.torch_fused \\
        --table $OUT/fused_tp1/h100_torch_fused.json --out $OUT/fused_tp2      # tp=2
    python -m sims.benchmarks.torch_fused --moe --out $OUT/moe_ep1              # MoE: calibrate, ep=1
    torchrun --nproc_per_node 2 -m sims.benchmarks.torch_fused --moe \\
        --table $OUT/moe_ep1/h100_torch_fused.json --out $OUT/moe_ep2          # ep=2
    python -m sims.benchmarks.torch_fused --tiny --out /tmp/fused              # CPU check, seconds
    python -m sims.benchmarks.torch_fused --refit $OUT/fused_tp1 --out DIR     # re-predict, no measuring

World size 1: times the torch_fused kernels of Qwen2.5-0.5B and a 4-layer Qwen3-8B
(sims/calibration/microbench.py with --stack torch_fused) and fits a table (`<hardware>_torch_fused.json`).
Any world size N: times whole prefill and decode steps of the 4-layer Qwen3-8B as a plain-PyTorch
decoder with tp=N (sims/benchmarks/plain_decoder.py; CUDA-graph replays, NCCL inside the graph),
or with --moe a 4-layer Qwen3-30B-A3B with ep=N (attention data-parallel, balanced routing),
and compares them with `simulate(..., {"tp": N}, stack="torch_fused")` using the built-in factors
and the table (this run's, or --table, e.g. one with the collectives fitted in). Whole steps are
never calibration measurements, so every case is held out. Writes accuracy_tp<N>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from sims import simulate
from sims.benchmarks.accuracy import decode, environment, hardware_for, model_config, prefill
from sims.calibration import microbench
from sims.calibration.fit import fit_table
from sims.calibration.table import save_table

STACK = "torch_fused"
CASES = (prefill(1, 512), prefill(2, 3072), decode(1, 2048), decode(32, 2048), decode(8, 8192))
TINY_CASES = (prefill(1, 32), prefill(2, 48), decode(1, 96), decode(4, 96))
# MoE, per rank: tokens * top_k a multiple of the experts (balanced routing), and enough tokens that
# every expert is hit, as the simulator's expected-touched-experts count then says too.
MOE_CASES = (prefill(1, 512), prefill(2, 1024), decode(64, 2048), decode(128, 1024))
TINY_MOE_CASES = (prefill(1, 32), decode(8, 64))


def suite(tiny: bool, moe: bool) -> tuple[str, dict, tuple]:
    """(name, hf_config, cases) of the model whose whole steps are timed."""
    if moe:
        return ("tiny_moe", model_config("tiny_moe"), TINY_MOE_CASES) if tiny else (
            "qwen3_30b_a3b_4l", model_config("qwen3_30b_a3b", 4), MOE_CASES)
    return ("tiny_qwen3", model_config("tiny_qwen3"), TINY_CASES) if tiny else (
        "qwen3_8b_4l", model_config("qwen3_8b", 4), CASES)


def layout_of(case: dict) -> tuple[dict, int]:
    """The simulator's layout for a case and the replicas its per-rank batch is multiplied by."""
    if case.get("ep", 1) > 1:
        return {"tp": 1, "dp": case["ep"], "ep": case["ep"]}, case["ep"]
    return {"tp": case["tp"]}, 1


def setup(cpu: bool):
    """(torch, device, tp, rank): joins torch.distributed when launched by torchrun."""
    import torch

    cuda = torch.cuda.is_available() and not cpu
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
        tp, rank = torch.distributed.get_world_size(), torch.distributed.get_rank()
    else:
        tp, rank = 1, 0
    return torch, torch.device("cuda", local_rank) if cuda else torch.device("cpu"), tp, rank


def calibrate(models: dict, hardware: dict, device: str, tiny: bool) -> list[dict]:
    plan = microbench.Plan(
        microbench.QUICK_WORKLOADS if tiny else microbench.WORKLOADS, dtype="fp32" if tiny else "bf16",
        warmup=1 if tiny else 3, repeats=3 if tiny else 10, copy_mb=16 if tiny else 512, stack=STACK,
        attention_grid=microbench.QUICK_ATTENTION_GRID if tiny else microbench.ATTENTION_GRID,
        prefill_grid=microbench.QUICK_PREFILL_GRID if tiny else microbench.PREFILL_GRID)
    return [m for cfg in models.values() for m in microbench.measure(cfg, hardware, plan, device)]


def measure_steps(name: str, cfg: dict, cases, torch, device, world: int, rank: int, graphs: bool) -> list[dict]:
    """Whole steps: tp = world for a dense model; for a MoE model ep = world (attention data-parallel)."""
    from sims.benchmarks.plain_decoder import ExpertParallelDecoder, PlainDecoder, time_lockstep

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    moe = bool(cfg.get("num_experts"))
    torch.manual_seed(0)
    dense = None if moe else PlainDecoder(cfg, world, rank, device, dtype)
    results = []
    for workload in cases:
        batch = workload["batch"]
        length = workload.get("seq_len") or 1
        model = ExpertParallelDecoder(cfg, world, rank, device, dtype, batch * length) if moe else dense
        ids = torch.randint(0, cfg["vocab_size"], (batch, length), device=device)
        caches = model.kv_cache(batch, workload["context_len"]) if workload["mode"] == "decode" else None
        with torch.no_grad():
            seconds, mode = time_lockstep(lambda: model.forward(ids, caches), device, 3, 10, graphs)
        split = {"tp": 1, "ep": world} if moe else {"tp": world}
        label = " ".join(f"{k}={v}" for k, v in split.items())
        results.append({"kind": "model", "name": f"{name} {label} {_label(workload)}", **split,
                        "workload": workload, "time_us": seconds * 1e6, "timing": mode, "held_out": True})
        del caches, model
    return results


def predict(cases: list[dict], cfg: dict, hardware: dict, table: str | None) -> None:
    for label, setting in (("default", None), ("calibrated", table)):
        if label == "calibrated" and setting is None:
            continue
        hw = {**hardware, "efficiency_table": setting}
        for case in cases:
            layout, replicas = layout_of(case)
            workload = {**case["workload"], "batch": case["workload"]["batch"] * replicas,
                        "dtype": "fp32" if case["timing"] == "cpu" else "bf16"}
            result = simulate(cfg, hw, layout, workload, stack=STACK)
            if result.status != "ok":
                raise SystemExit(f"the simulator cannot model {case['name']}: {result.reason}")
            predicted = result.latency_s * 1e6
            case[f"predicted_{label}_us"] = predicted
            case[f"error_{label}"] = (predicted - case["time_us"]) / case["time_us"]


def summarise(cases: list[dict]) -> dict:
    out = {}
    for label in ("default", "calibrated"):
        errors = [abs(c[f"error_{label}"]) for c in cases if f"error_{label}" in c]
        if errors:
            out[label] = {"median_abs_error": statistics.median(errors), "worst_abs_error": max(errors),
                          "cases": len(errors)}
    return out


def markdown(report: dict) -> str:
    lines = ["| case | measured (us) | built-in | calibrated |", "|---|---|---|---|"]
    for c in report["cases"]:
        calibrated = f"{c['error_calibrated']:+.1%}" if "error_calibrated" in c else "-"
        lines.append(f"| {c['name']} | {c['time_us']:.1f} | {c['error_default']:+.1%} | {calibrated} |")
    lines += ["", "| | median abs. error | worst | cases |", "|---|---|---|---|"]
    for label, s in report["summary"].items():
        lines.append(f"| {label} | {s['median_abs_error']:.1%} | {s['worst_abs_error']:.1%} | {s['cases']} |")
    return "\n".join(lines) + "\n"


def _label(workload: dict) -> str:
    if workload["mode"] == "decode":
        return f"decode b={workload['batch']} ctx={workload['context_len']}"
    return f"prefill b={workload['batch']} s={workload['seq_len']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON and Markdown files")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--hardware", default=None, help="conf/hardware name (default: from the device)")
    parser.add_argument("--table", help="a torch_fused table to predict with (default: fit one here, world size 1)")
    parser.add_argument("--moe", action="store_true",
                        help="a 4-layer Qwen3-30B-A3B, expert-parallel over the ranks (ep = world size)")
    parser.add_argument("--no-graphs", action="store_true", help="time eager steps (no CUDA graphs)")
    parser.add_argument("--refit", metavar="DIR", help="no measuring: refit and re-predict a run saved in DIR")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name, model, steps = suite(args.tiny, args.moe)
    if args.refit:
        saved = json.loads(next(Path(args.refit).glob("accuracy_*.json")).read_text())
        hardware, cases, env, model = saved["hardware"], saved["cases"], saved["environment"], saved["model"]
        measurements_file = Path(args.refit) / "microbench.json"
        measurements = json.loads(measurements_file.read_text()) if measurements_file.exists() else None
        tp, rank = max(cases[0]["tp"], cases[0].get("ep", 1)), 0
    else:
        torch, device, tp, rank = setup(args.tiny)
        hardware = hardware_for(device.type if device.type == "cpu" else str(device), args.hardware)
        if device.type == "cpu":  # the CPU file describes one device: let the check's ranks count as a node
            hardware = {**hardware, "devices_per_node": tp, "intra_node_gb_s": hardware["intra_node_gb_s"] or 1.0}
        env = environment(str(device))
        measurements = None
        if tp == 1 and not args.table:
            calibration = {name: model}
            if not args.tiny and not args.moe:
                calibration["qwen2_5_0_5b"] = model_config("qwen2_5_0_5b_instruct")
            measurements = calibrate(calibration, hardware, str(device), args.tiny)
        cases = measure_steps(name, model, steps, torch, device, tp, rank, graphs=not args.no_graphs)
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if rank != 0:
        return
    table = args.table
    if measurements is not None:
        (out / "microbench.json").write_text(json.dumps(measurements, indent=1))
        table = str(out / f"{hardware['name']}_{STACK}.json")
        source = f"sims.benchmarks.torch_fused on {env['device']}, torch {env['torch']}, {env['date']}"
        save_table(fit_table(measurements, hardware, source=source, stack=STACK), table)
    predict(cases, model, hardware, table)
    report = {"environment": env, "hardware": hardware, "model": model, "stack": STACK, "table": table,
              "summary": summarise(cases), "cases": cases}
    tag = f"{'ep' if args.moe or model.get('num_experts') else 'tp'}{tp}"
    (out / f"accuracy_{tag}.json").write_text(json.dumps(report, indent=1))
    (out / f"accuracy_{tag}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
