"""How close the simulator's times are to real ones: predicted vs measured on this machine's GPU.

    python -m sims.benchmarks.accuracy --out $OUT          # GPU: about 3 minutes
    python -m sims.benchmarks.accuracy --tiny --out /tmp/acc   # CPU: tiny shapes, seconds

Measures, with torch and transformers (random weights from `from_config`, no download):
  * calibration: the kernels of Qwen2.5-0.5B, a 4-layer Qwen3-8B and a 4-layer Qwen3-30B-A3B at
    the micro-benchmark plan's workloads (sims/calibration/microbench.py), fitted into an
    efficiency table;
  * held-out cases, none of them used to fit the table: single GEMMs of two other models
    (Llama-3.1-8B, Qwen2.5-7B), attention (prefill and decode) and the MoE experts module at
    workloads off the calibration grid, and whole-model prefill and decode steps of the three
    models (the simulator is given the same reduced hf_config).
Whole models run transformers' forward (sdpa attention, grouped-GEMM experts, logits of the last
token only, a static KV cache written at the end of the context) and are timed as CUDA graph
replays (GPU time, no host overhead; eager timings, host included, are recorded beside them).
Kernels are timed the same way (sims/calibration/timing.py). Each case is predicted with the
built-in efficiency factors and with the fitted table; errors are (predicted - measured) /
measured. Writes accuracy.json (and .md), microbench.json and the fitted table to --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import traceback
from collections.abc import Mapping
from pathlib import Path

import yaml

from sims import predict_op, simulate
from sims.calibration import microbench
from sims.hardware import read_hardware_file
from sims.calibration.fit import fit_table
from sims.calibration.kernels import HFKernels, build_hf_model
from sims.calibration.table import save_table
from sims.calibration.timing import rotations, time_call
from sims.benchmarks.accuracy_report import markdown, print_table, summarise
from sims.benchmarks.hf_steps import time_model
from sims.calculator import bind_dims
from sims.builders import build_graph
from sims.workload import Layout, parse_workload

REPO = Path(__file__).resolve().parents[2]
MOE_PARTS = ("moe_permute", "experts_gate_up", "experts_act", "experts_down", "moe_unpermute")
TINY_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 512, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "tie_word_embeddings": False,
}


def model_config(name: str, layers: int | None = None) -> dict:
    if name == "tiny_moe":
        cfg = TINY_MOE
    else:
        cfg = yaml.safe_load((REPO / f"conf/model/{name}.yaml").read_text())["hf_config"]
    return {**cfg, "num_hidden_layers": layers} if layers else dict(cfg)


def prefill(batch: int, seq_len: int) -> dict:
    return {"mode": "prefill", "batch": batch, "seq_len": seq_len}


def decode(batch: int, context_len: int) -> dict:
    return {"mode": "decode", "batch": batch, "context_len": context_len}


def suite(tiny: bool) -> dict:
    """Models, the calibration plan and the held-out cases (full: H100-sized; tiny: CPU seconds)."""
    if tiny:
        models = {name: model_config(f"tiny_{name}") for name in ("qwen2", "qwen3", "moe")}
        model_points = [prefill(1, 32), prefill(2, 48), decode(1, 96), decode(4, 96)]
        return {
            "models": models,
            "workloads": microbench.QUICK_WORKLOADS,
            "gemm": [
                ("tiny_llama", op, w) for op in ("q_proj", "mlp_down_proj") for w in (decode(3, 8), prefill(1, 40))
            ],
            "attention": [("qwen3", prefill(1, 80)), ("qwen2", decode(3, 80))],
            "moe_block": [decode(3, 16), prefill(1, 40)],
            "whole": [(name, w) for name in models for w in model_points],
        }
    models = {
        "qwen2_5_0_5b": model_config("qwen2_5_0_5b_instruct"),
        "qwen3_8b_4l": model_config("qwen3_8b", layers=4),
        "qwen3_30b_a3b_4l": model_config("qwen3_30b_a3b", layers=4),
    }
    model_points = [prefill(1, 512), prefill(2, 3072), decode(1, 2048), decode(32, 2048)]
    return {
        "models": models,
        "workloads": microbench.WORKLOADS,
        "gemm": [
            ("llama3_1_8b", "q_proj", decode(1, 2048)),
            ("llama3_1_8b", "q_proj", prefill(1, 512)),
            ("llama3_1_8b", "q_proj", prefill(4, 1024)),
            ("llama3_1_8b", "mlp_down_proj", decode(16, 2048)),
            ("llama3_1_8b", "mlp_down_proj", prefill(1, 2048)),
            ("qwen2_5_7b", "o_proj", prefill(1, 256)),
            ("qwen2_5_7b", "o_proj", decode(64, 2048)),
            ("qwen2_5_7b", "lm_head", decode(32, 2048)),
        ],
        "attention": [
            ("qwen3_8b_4l", prefill(1, 4096)),
            ("qwen3_8b_4l", prefill(8, 512)),
            ("qwen3_8b_4l", decode(16, 8192)),
            ("qwen3_8b_4l", decode(4, 512)),
            ("qwen2_5_0_5b", prefill(2, 3072)),
            ("qwen2_5_0_5b", decode(32, 2048)),
        ],
        "moe_block": [decode(32, 2048), prefill(1, 3072)],
        "whole": [(name, w) for name in models for w in model_points],
    }


def calibrate(models: Mapping[str, dict], hardware: dict, plan: microbench.Plan, device: str) -> list[dict]:
    measurements = []
    for name, cfg in models.items():
        print(f"calibration: {name}", flush=True)
        measurements += microbench.measure(cfg, hardware, plan, device)
        _free(device)
    return measurements


def measure_cases(
    s: dict, hardware: dict, plan: microbench.Plan, device: str, dtype: str, profile: bool = False
) -> list[dict]:
    """Time every held-out case; a case that fails is kept with its error."""
    cases = []
    kernels_by_model: dict[str, HFKernels] = {}

    def kernels(name: str) -> HFKernels:
        if name not in kernels_by_model:
            kernels_by_model.clear()
            _free(device)
            kernels_by_model[name] = HFKernels(_config(s, name), device, dtype)
        return kernels_by_model[name]

    def run(case: dict, measure) -> None:
        print(f"case: {case['name']}", flush=True)
        try:
            case.update(measure())
        except Exception as error:  # keep going: the other cases still tell something
            case["error"] = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        cases.append(case)

    for model, op, workload in s["gemm"]:
        w = {**workload, "dtype": dtype}
        run({"kind": "gemm", "name": f"{model} {op} {_label(w)}", "model": model, "op": op, "workload": w},
            lambda: _time_node(kernels(model), _config(s, model), op, w, hardware, device, plan))
    for model, workload in s["attention"]:
        w = {**workload, "dtype": dtype}
        case = {"kind": "attention", "name": f"{model} attention {_label(w)}", "model": model, "op": "attention",
                "workload": w}
        run(case, lambda: _time_node(kernels(model), _config(s, model), "attention", w, hardware, device, plan))
    moe = next(name for name, cfg in s["models"].items() if cfg.get("num_experts"))
    for workload in s["moe_block"]:
        w = {**workload, "dtype": dtype}
        run({"kind": "moe_block", "name": f"{moe} experts module {_label(w)}", "model": moe, "workload": w},
            lambda: _time_moe_block(kernels(moe), _config(s, moe), w, hardware, device, plan))
    kernels_by_model.clear()
    for name in s["models"]:
        model = None
        for _, workload in (c for c in s["whole"] if c[0] == name):
            w = {**workload, "dtype": dtype}
            if model is None:
                _free(device)
                model = build_hf_model(s["models"][name], device, dtype)
            run({"kind": "model", "name": f"{name} {_label(w)}", "model": name, "workload": w},
                lambda: time_model(model, w, device, plan.warmup, plan.repeats, profile))
        del model
    return cases


def predict(cases: list[dict], s: dict, hardware: dict, table_path: str) -> None:
    calibrated = {**hardware, "efficiency_table": table_path}
    for case in cases:
        if "time_us" not in case:
            continue
        for label, hw in (("default", hardware), ("calibrated", calibrated)):
            predicted = _predict_us(case, _config(s, case["model"]), hw)
            case[f"predicted_{label}_us"] = predicted
            case[f"error_{label}"] = (predicted - case["time_us"]) / case["time_us"]


def _predict_us(case: dict, cfg: dict, hw: dict) -> float:
    if case["kind"] == "model":
        return simulate(cfg, hw, {}, case["workload"]).latency_s * 1e6
    ops = MOE_PARTS if case["kind"] == "moe_block" else (case["op"],)
    return sum(predict_op(cfg, hw, case["workload"], op)["time_s"] for op in ops) * 1e6


def mark_held_out(cases: list[dict], measurements: list[dict]) -> None:
    """A case is held out when no calibration measurement timed the same model shape at the same
    workload (whole models and the experts module are never measured whole during calibration)."""
    timed = {(m.get("op"), m.get("flops"), m.get("bytes")) for m in measurements}
    for case in cases:
        if case["kind"] in ("gemm", "attention") and "work" in case:
            case["held_out"] = (case["op"], case["work"]["flops"], case["work"]["bytes"]) not in timed
        else:
            case["held_out"] = True


def _time_node(
    kernels: HFKernels, cfg: dict, op: str, workload: dict, hardware: dict, device: str, plan: microbench.Plan
) -> dict:
    parsed = parse_workload(workload)
    graph = build_graph(cfg, parsed.mode)
    bench = kernels.bench(graph.node(op), bind_dims(graph, Layout(), parsed))
    work = predict_op(cfg, hardware, workload, op)
    timing = _time_bench(bench, work["bytes"], device, plan)
    return {**timing, "work": {"flops": work["flops"], "bytes": work["bytes"]}}


def _time_moe_block(
    kernels: HFKernels, cfg: dict, workload: dict, hardware: dict, device: str, plan: microbench.Plan
) -> dict:
    parsed = parse_workload(workload)
    tokens = parsed.batch * parsed.query_len
    nbytes = sum(predict_op(cfg, hardware, workload, op)["bytes"] for op in MOE_PARTS)
    return _time_bench(kernels.moe_block(tokens), nbytes, device, plan)


def _time_bench(bench, nbytes: float, device: str, plan: microbench.Plan) -> dict:
    args = [bench.make_args() for _ in range(rotations(nbytes, device))]
    timing = time_call(bench.fn, args, device, plan.warmup, plan.repeats, plan.graphs)
    return {"time_us": timing.time_us, "timing": timing.mode, "spread": timing.spread}


def _config(s: dict, name: str) -> dict:
    return s["models"].get(name) or model_config(name)


def _label(workload: Mapping) -> str:
    if workload["mode"] == "decode":
        return f"decode b={workload['batch']} ctx={workload['context_len']}"
    return f"prefill b={workload['batch']} s={workload['seq_len']}"


def _free(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def hardware_for(device: str, name: str | None) -> dict:
    """The conf/hardware file for this device: named, or guessed from the CUDA device name."""
    if name is None:
        if device.startswith("cuda"):
            import torch

            card = torch.cuda.get_device_name(device).upper()
            name = next((n for n in ("h200", "h100", "a100", "mi300x") if n.upper() in card), None)
            if name is None:
                raise SystemExit(f"no conf/hardware file for {card!r}; pass --hardware NAME")
        else:
            name = "cpu"
    record = read_hardware_file(REPO / f"conf/hardware/{name}.yaml")
    return {**record, "efficiency_table": None}  # "built-in": the factors without any table


def environment(device: str) -> dict:
    import torch
    import transformers

    card = torch.cuda.get_device_name(device) if device.startswith("cuda") else platform.processor() or "cpu"
    return {
        "date": datetime.date.today().isoformat(),
        "device": card,
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: checks the script in seconds")
    parser.add_argument("--out", default=os.environ.get("OUT", "accuracy_out"), help="folder for the JSON files")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available; cpu with --tiny)")
    parser.add_argument("--hardware", default=None, help="conf/hardware name (default: from the device)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--profile", action="store_true", help="also list the GPU kernels of each whole-model step")
    parser.add_argument("--refit", metavar="DIR", help="no measuring: refit and re-predict a run saved in DIR")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    s = suite(args.tiny)
    if args.refit:
        saved = json.loads((Path(args.refit) / "accuracy.json").read_text())
        measurements = json.loads((Path(args.refit) / "microbench.json").read_text())
        env, hardware = saved["environment"], hardware_for("cpu", saved["hardware"])
        cases = [{k: v for k, v in c.items() if not k.startswith(("predicted_", "error_"))} for c in saved["cases"]]
    else:
        device = args.device or ("cpu" if args.tiny else microbench.default_device())
        dtype = "fp32" if device == "cpu" else "bf16"
        hardware = hardware_for(device, args.hardware)
        plan = microbench.Plan(s["workloads"], dtype=dtype, repeats=args.repeats or (5 if args.tiny else 10),
                               warmup=1 if args.tiny else 3, copy_mb=16 if args.tiny else 512,
                               count_kernels=args.profile,
                               attention_grid=microbench.QUICK_ATTENTION_GRID if args.tiny else microbench.ATTENTION_GRID,
                               prefill_grid=microbench.QUICK_PREFILL_GRID if args.tiny else microbench.PREFILL_GRID)
        env = environment(device)
        print(json.dumps(env), flush=True)
        measurements = calibrate(s["models"], hardware, plan, device)
        (out / "microbench.json").write_text(json.dumps(measurements, indent=1))
        cases = measure_cases(s, hardware, plan, device, dtype, args.profile)
    table_path = out / f"{hardware['name']}.json"
    source = (f"sims.benchmarks.accuracy on {env['device']}, torch {env['torch']}, transformers "
              f"{env['transformers']}, {env['date']} (kernels as transformers runs them, CUDA-graph timed)")
    save_table(fit_table(measurements, hardware, source=source, stack="transformers"), table_path)
    mark_held_out(cases, measurements)
    predict(cases, s, hardware, str(table_path.resolve()))
    summary = summarise(cases)
    report = {"environment": env, "hardware": hardware["name"], "dtype": cases[0]["workload"]["dtype"],
              "table": table_path.name, "calibration_measurements": len(measurements), "summary": summary,
              "cases": cases}
    (out / "accuracy.json").write_text(json.dumps(report, indent=1))
    (out / "accuracy.md").write_text(markdown(report))
    print_table(cases, summary)


if __name__ == "__main__":
    main()
