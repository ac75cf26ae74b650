"""Training steps: calibrate the backward kernels, then predict held-out whole training steps.

    python -m sims.benchmarks.train_steps --out $OUT/train              # one GPU, about a minute
    python -m sims.benchmarks.train_steps --tiny --out /tmp/train       # CPU check, seconds
    python -m sims.benchmarks.train_steps --refit DIR --out DIR2        # refit + re-predict, no measuring

1. The `backward` micro-benchmarks (sims/calibration/train_bench.py) of Qwen2.5-0.5B and Llama-3.2-1B
   shapes for each stack of --stacks (default torch_fused and transformers): every train-graph node
   forward and forward + backward, the loss over the vocabulary, the gradient accumulation, the
   optimizer step. Written as microbench_<stack>.json; each stack's table (<hardware>_<stack>_train.json)
   is fitted from the shipped table's measurement files (sims/calibration/tables/refit.yaml) plus these.
2. Held-out whole training steps, never calibration inputs: sims/benchmarks/train_decoder.py (the
   torch_fused stack trained as Megatron's local spec trains it) on Qwen2.5-0.5B and a 4-layer
   Llama-3.2-1B at several micro-batch x sequence x micro-batch counts, recompute on and off; each
   step synchronised, the median of the timed steps after warm-up.
3. Predictions of every step by `simulate(..., stack="torch_fused")` with the shipped table (backward
   2x forward: it has no backward measurements) and with this run's table; train_steps.json and .md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import yaml

from sims import simulate
from sims.benchmarks.accuracy import _free, environment, hardware_for, model_config
from sims.calibration import microbench
from sims.calibration.fit import fit_table
from sims.calibration.refit import SHIPPED, entry_measurements
from sims.calibration.table import save_table
from sims.calibration.timing import wall_median_s
from sims.hardware import REPO_ROOT

STACK = "torch_fused"  # the held-out steps' stack
CALIBRATED = {"qwen2_5_0_5b": ("qwen2_5_0_5b_instruct", None), "llama3_2_1b": ("llama3_2_1b", None)}
TINY_CALIBRATED = {"tiny_llama": ("tiny_llama", None)}
# (model, layers, micro-batch, seq_len, micro-batches, recompute)
CASES = (
    ("qwen2_5_0_5b_instruct", None, 2, 2048, 4, False),
    ("qwen2_5_0_5b_instruct", None, 4, 1024, 4, True),
    ("llama3_2_1b", 4, 2, 2048, 2, False),
    ("llama3_2_1b", 4, 1, 4096, 2, True),
    ("llama3_2_1b", 4, 4, 1024, 4, False),
)
TINY_CASES = (("tiny_llama", None, 2, 32, 2, False), ("tiny_qwen2", None, 2, 32, 2, True))


def calibrate(stack: str, models: dict, hardware: dict, device: str, tiny: bool) -> list[dict]:
    plan = microbench.Plan(
        (), ("backward", "copy", "launch"), dtype="fp32" if tiny else "bf16", warmup=1 if tiny else 3,
        repeats=3 if tiny else 10, copy_mb=16 if tiny else 512, stack=stack, skip_failed=True,
        train_workloads=microbench.QUICK_TRAIN_WORKLOADS if tiny else microbench.TRAIN_WORKLOADS)
    measurements = []
    for name, layers in models.values():
        measurements += microbench.measure(model_config(name, layers), hardware, plan, device)
        _free(device)
    return measurements


def shipped_measurements(hardware: str, stack: str) -> list[dict]:
    """The measurements the shipped table of (hardware, stack) is refitted from (none: unknown)."""
    name = f"{hardware}.json" if stack == "transformers" else f"{hardware}_{stack}.json"
    spec = yaml.safe_load(SHIPPED.read_text()).get(name)
    return [m for entry in spec["files"] for m in entry_measurements(entry)] if spec else []


def fit_stack_table(stack: str, measurements: list[dict], hardware: dict, env: dict, out: Path) -> str:
    source = (f"shipped {stack} measurements + sims.benchmarks.train_steps backward kernels on {env['device']}, "
              f"torch {env['torch']}, {env['date']}")
    path = out / f"{hardware['name']}_{stack}_train.json"
    measurements = shipped_measurements(hardware["name"], stack) + measurements
    save_table(fit_table(measurements, hardware, source=source, stack=stack), path)
    return str(path)


def measure_steps(cases, device: str, tiny: bool) -> list[dict]:
    import torch

    from sims.benchmarks.train_decoder import TrainDecoder

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    warmup, repeats = (1, 2) if tiny else (3, 8)
    results = []
    for name, layers, micro_batch, seq_len, micro_batches, recompute in cases:
        cfg = model_config(name, layers)
        case = {"name": f"{name}{f' {layers}L' if layers else ''} mb={micro_batch} s={seq_len} m={micro_batches}"
                        f"{' recompute' if recompute else ''}", "model": name, "layers": layers,
                "workload": {"mode": "train", "batch": micro_batch * micro_batches, "seq_len": seq_len,
                             "microbatches": micro_batches, "recompute": recompute,
                             "dtype": "fp32" if device == "cpu" else "bf16"}, "held_out": True}
        try:
            torch.manual_seed(0)
            model = TrainDecoder(cfg, device, dtype, recompute)
            batches = [(torch.randint(0, cfg["vocab_size"], (micro_batch, seq_len), device=device),
                        torch.randint(0, cfg["vocab_size"], (micro_batch, seq_len), device=device))
                       for _ in range(micro_batches)]
            seconds = timed(lambda: model.step(batches), device, warmup, repeats)
            case["time_us"] = seconds * 1e6
            case["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9 if device.startswith("cuda") else None
            print(f"{case['name']}: {seconds * 1e3:.1f} ms", flush=True)
        except RuntimeError as error:  # out of memory: reported, the other cases still run
            case["failed"] = str(error).splitlines()[0]
            print(f"{case['name']}: failed: {case['failed']}", flush=True)
        results.append(case)
        model = batches = None
        _free(device)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
    return results


def timed(step, device: str, warmup: int, repeats: int) -> float:
    import torch

    return wall_median_s(step, warmup, repeats, torch.cuda.synchronize if device.startswith("cuda") else lambda: None)


def predict(cases: list[dict], hardware: dict, tables: dict[str, str | None]) -> None:
    """predicted_<label>_us and error_<label> for each table (None: the hardware file's own)."""
    for label, table in tables.items():
        hw = dict(hardware) if table is None else {**hardware, "efficiency_table": table}
        for case in (c for c in cases if "time_us" in c):
            result = simulate(model_config(case["model"], case["layers"]), hw, {"tp": 1}, case["workload"], stack=STACK)
            if result.status != "ok":
                raise SystemExit(f"the simulator cannot model {case['name']}: {result.reason}")
            case[f"predicted_{label}_us"] = result.latency_s * 1e6
            case[f"error_{label}"] = (result.latency_s * 1e6 - case["time_us"]) / case["time_us"]
            if label == "calibrated":
                case["breakdown_ms"] = {row["name"]: row["time_s"] * 1e3 for row in result.breakdown_rows()}


def markdown(report: dict) -> str:
    labels = report["labels"]
    lines = ["| step (held out) | measured (ms) | " + " | ".join(f"{label} (ms, error)" for label in labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    timed_cases = [c for c in report["cases"] if "time_us" in c]
    for c in timed_cases:
        cells = [f"{c[f'predicted_{label}_us'] / 1e3:.1f} ({c[f'error_{label}']:+.1%})" for label in labels]
        lines.append(f"| {c['name']} | {c['time_us'] / 1e3:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "| table | median abs. error | worst | cases |", "|---|---|---|---|"]
    for label in labels:
        errors = [abs(c[f"error_{label}"]) for c in timed_cases]
        lines.append(f"| {label} | {statistics.median(errors):.1%} | {max(errors):.1%} | {len(errors)} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON and Markdown files")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: checks the script in seconds")
    parser.add_argument("--hardware", default=None, help="conf/hardware name (default: from the device)")
    parser.add_argument("--stacks", nargs="+", default=[STACK, "transformers"], choices=("torch_fused", "transformers"),
                        help="stacks whose backward kernels to calibrate (the steps use torch_fused's)")
    parser.add_argument("--refit", metavar="DIR", help="no measuring: refit and re-predict a run saved in DIR")
    parser.add_argument("--budget-s", type=float, default=150.0,
                        help="start no further stack's calibration after this many seconds")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.refit:
        saved = json.loads((Path(args.refit) / "train_steps.json").read_text())
        env, cases = saved["environment"], saved["cases"]
        hardware = hardware_for("cpu", saved["hardware"])
        measured = {stack: json.loads((Path(args.refit) / f"microbench_{stack}.json").read_text())
                    for stack in saved["stacks"]}
    else:
        device = "cpu" if args.tiny else microbench.default_device()
        hardware = hardware_for(device, args.hardware)
        env = environment(device)
        print(json.dumps(env), flush=True)
        started = time.perf_counter()
        cases = measure_steps(TINY_CASES if args.tiny else CASES, device, args.tiny)  # the truth first
        (out / "train_steps.json").write_text(json.dumps({"environment": env, "hardware": hardware["name"],
                                                          "stacks": [], "cases": cases}, indent=1))
        measured = {}
        for stack in args.stacks:
            if measured and time.perf_counter() - started > args.budget_s:
                print(f"skipped the {stack} calibration: past --budget-s {args.budget_s}", flush=True)
                continue
            measured[stack] = calibrate(stack, TINY_CALIBRATED if args.tiny else CALIBRATED, hardware, device, args.tiny)
            (out / f"microbench_{stack}.json").write_text(json.dumps(measured[stack], indent=1))
            print(f"{stack}: {len(measured[stack])} measurements, {time.perf_counter() - started:.0f} s", flush=True)
    tables = {stack: fit_stack_table(stack, m, hardware, env, out) for stack, m in measured.items()}
    shipped = shipped_torch_fused_table(hardware["name"])
    labels = {"shipped": shipped, "calibrated": tables.get(STACK)}
    predict(cases, hardware, {label: table for label, table in labels.items() if table or label == "shipped"})
    report = {"environment": env, "hardware": hardware["name"], "stacks": list(measured), "tables": tables,
              "labels": [label for label in labels if any(f"predicted_{label}_us" in c for c in cases)], "cases": cases}
    (out / "train_steps.json").write_text(json.dumps(report, indent=1))
    (out / "train_steps.md").write_text(markdown(report))
    print(markdown(report))


def shipped_torch_fused_table(name: str) -> str | None:
    """The shipped torch_fused table of conf/hardware/<name>.yaml (None: built-in factors)."""
    from sims.hardware import read_hardware_file

    tables = read_hardware_file(REPO_ROOT / f"conf/hardware/{name}.yaml").get("efficiency_table") or {}
    return tables.get(STACK) if isinstance(tables, dict) else tables


if __name__ == "__main__":
    main()
