"""Calibrate the simulator's `xla` stack from the maxtext backend's own JAX ops, and check it on whole steps.

    python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --out $OUT/xla     # GPU, about 5 minutes
    python -m framework.backends.maxtext.benchmarks.xla_calibrate --tiny --out /tmp/xla   # CPU check, seconds
    python3 -m ...xla_calibrate --models qwen2_5_1_5b_instruct --out DIR   # another model size, GPU
    python -m ...xla_calibrate --repredict TABLE RUN/accuracy.json ...       # saved held-out steps, no GPU

Calibration: for Qwen2.5-0.5B and Qwen3-8B (conf/model, random weights, one decoder layer) and each
workload of the plan, the simulator's graph for the `xla` stack is bound to the workload (as
sims/calibration/microbench.py does for torch) and every node is timed as the backend computes it
(benchmarks/xla_kernels.py: jitted, many repetitions inside one compiled loop, median of repeats),
plus decode attention on a batch x KV-length grid, a large copy and a one-element kernel. Each record
has microbench.py's format (the FLOPs and bytes `sims.predict_op` counts for the node), so
`sims.calibration.fit.fit_table` fits `<hardware>_xla.json` exactly as it fits the torch tables.

Held out (never calibration inputs): the backend's whole Transformer, a prefill (hidden states
without a cache, as the update's and log-prob passes run it, plus each row's last-token logits) and
one decode step over a KV cache (unrolled layers, the Pallas decode kernel on GPU; the sampler's
token sampling is not part of it), each timed in the same loop, against `simulate(..., stack="xla")`
with the built-in factors and with the fitted table. Each model's first prefill is also timed with its
layers unrolled (no scan over the stacked weights) and its compiled HLO is kept in hlo/: the scan's own
cost. Writes microbench.json, <hardware>_xla.json, accuracy.json and accuracy.md to --out.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from pathlib import Path

from sims import predict_op
from sims.builders import build_graph
from sims.calculator import OP_CLASS, bind_dims
from sims.calibration.fit import fit_table
from sims.calibration.table import save_table
from sims.hardware import read_hardware_file
from sims.workload import Layout, parse_workload

from framework.backends.maxtext.benchmarks.xla_whole_steps import STACK, predict, scan_lines, whole_steps
from framework.core.paths import REPO_ROOT, load_conf

BENCHMARKS = ("gemm", "attention", "norm", "elementwise", "embedding")


def prefill(batch: int, seq_len: int) -> dict:
    return {"mode": "prefill", "batch": batch, "seq_len": seq_len}


def decode(batch: int, context_len: int) -> dict:
    return {"mode": "decode", "batch": batch, "context_len": context_len}


# Calibration points. Most needed first (a spent time budget skips the rest): the rollout's own decode
# shapes (128 rows on one card, 64 per card at dp=2; KV 384, the middle of a 256 + 256-token rollout),
# the update's micro-batch GEMMs (8192 tokens), decode at 16 and 256 rows; then the attention grid and
# the rest. Held out: prefill 512-token rows, decode 128 x 512 and 16 x 2048 (the 128-row decode shares
# its GEMM shapes with the calibration's 128 x 384, not its attention or KV cache).
FULL = {
    "models": {"qwen2_5_0_5b": ("qwen2_5_0_5b_instruct", None), "qwen3_8b": ("qwen3_8b", None)},
    "workloads": (decode(128, 384), decode(64, 384), prefill(8, 1024), decode(16, 1024), decode(256, 1024),
                  prefill(1, 256), prefill(2, 1024)),
    "grid_after": 5,  # the attention grid runs after this many workloads
    "attention_grid": tuple((b, kv) for b in (8, 48, 192) for kv in (320, 1280, 3072)),
    "dtype": "bfloat16", "repeats": 5, "target_s": 3e-3, "copy_mb": 256, "budget_s": 280.0,
    "held_out": (("qwen2_5_0_5b", ("qwen2_5_0_5b_instruct", None), (prefill(1, 512), prefill(8, 512),
                                                                   decode(128, 512), decode(16, 2048))),
                 ("qwen3_8b_4l", ("qwen3_8b", 4), (prefill(1, 512), decode(128, 512), decode(16, 2048)))),
}
TINY = {
    "models": {"tiny_qwen3": ("tiny_qwen3", None), "tiny_qwen2": ("tiny_qwen2", None)},
    "workloads": (prefill(1, 16), prefill(2, 64), decode(2, 64)),
    "grid_after": 2,
    "attention_grid": ((1, 16), (2, 48)),
    "dtype": "float32", "repeats": 3, "target_s": 2e-4, "copy_mb": 4, "budget_s": float("inf"),
    "held_out": (("tiny_qwen3", ("tiny_qwen3", None),
                  (prefill(1, 32), prefill(2, 32), decode(4, 96), decode(2, 160))),),
}


def with_models(plan: dict, names: list[str]) -> dict:
    """The plan for other conf/model names (a size the shipped tables lack): each calibrated at the plan's
    workloads and held out as whole steps (a 512-token prefill, decode of 128 x 512 and 16 x 2048)."""
    held_out = tuple((name, (name, None), (prefill(1, 512), decode(128, 512), decode(16, 2048))) for name in names)
    return {**plan, "models": {name: (name, None) for name in names}, "held_out": held_out}


def repredict(table: str, reports: list[str]) -> dict:
    """Saved runs' held-out whole steps (their accuracy.json) predicted with `table`: median / worst and per case."""
    import statistics

    out = {}
    for path in reports:
        report = json.loads(Path(path).read_text())
        predict(report["cases"], report["models"], report["hardware"], table, report.get("dtype", "bf16"))
        errors = [abs(case["error_calibrated"]) for case in report["cases"]]
        print(f"{path}: median {statistics.median(errors):.1%}, worst {max(errors):.1%}")
        for case in report["cases"]:
            print(f"  {case['name']:<48} measured {case['time_us']:9.1f} us  predicted "
                  f"{case['predicted_calibrated_us']:9.1f} us  {case['error_calibrated']:+.1%}")
        out[path] = report["cases"]
    return out


def model_config(name: str, layers: int | None) -> dict:
    cfg = dict(load_conf("model", name)["hf_config"])
    return {**cfg, "num_hidden_layers": layers} if layers else cfg


def measure(hf_config: dict, hardware: dict, plan: dict, timer, platform_name: str, log,
            deadline: float = float("inf")) -> list[dict]:
    """Every node of the xla graph at every workload of the plan (deduplicated by FLOPs and bytes);
    nodes still untimed at `deadline` (time.perf_counter) are skipped, so that a slow compiler cannot
    take the whole run's time (the skipped count is logged)."""
    from framework.backends.maxtext.benchmarks.xla_kernels import XlaKernels

    dtype = "bf16" if plan["dtype"] == "bfloat16" else "fp32"
    kernels = XlaKernels(hf_config, plan["dtype"], platform_name)
    grid = [{**decode(b, kv), "only": "attention"} for b, kv in plan["attention_grid"]]
    records, seen, skipped = [], set(), 0
    first = plan["grid_after"]
    for raw in (*plan["workloads"][:first], *grid, *plan["workloads"][first:]):
        workload = {**{k: v for k, v in raw.items() if k != "only"}, "dtype": dtype}
        parsed = parse_workload(workload)
        graph = build_graph(hf_config, parsed.mode, STACK)
        dims = bind_dims(graph, Layout(), parsed)
        point = {"mode": parsed.mode, "batch": parsed.batch, "seq_len": parsed.query_len, "kv_len": parsed.kv_len}
        for node in graph.nodes:
            wanted = not node.is_comm and OP_CLASS[node.op_type] in BENCHMARKS
            if not wanted or raw.get("only", node.op_type) != node.op_type:
                continue
            work = predict_op(hf_config, hardware, workload, node.name, stack=STACK)
            key = (node.name, work["flops"], work["bytes"])
            bench = None if key in seen else kernels.bench(node, dims)
            if bench is None:
                continue
            seen.add(key)
            if time.perf_counter() > deadline:
                skipped += 1
                continue
            try:
                timing = timer.time(bench, work["bytes"], work["time_s"])
            except Exception as error:  # noqa: BLE001 - one kernel that fails to build must not lose the run
                log(f"{node.name:<30} {_point_label(point):<28} FAILED: {type(error).__name__}: {str(error)[:300]}")
                continue
            record = {"benchmark": node.name, "op": node.name, "op_class": work["op_class"], "dtype": dtype, **point,
                      "tokens": int(dims["tokens"]), "flops": work["flops"], "bytes": work["bytes"]}
            if node.op_type == "gemm":
                rows = dims["logit_tokens"] if node.name == "lm_head" else dims["tokens"]
                record.update(m=int(rows), n=node.weights[0][1], k=node.weights[0][0])
            records.append({**record, **timing_fields(timing)})
            log(f"{node.name:<30} {_point_label(point):<28} {timing.time_us:10.1f} us")
    if skipped:
        log(f"time budget spent: {skipped} nodes not timed")
    element = 4 if dtype == "fp32" else 2
    nbytes = plan["copy_mb"] * 2**20
    device = [("copy", kernels.copy(nbytes), {"flops": 0.0, "bytes": 2.0 * nbytes}),
              ("launch", kernels.launch(), {"flops": 1.0, "bytes": 2.0 * element})]
    for name, bench, work in device:
        timing = timer.time(bench, work["bytes"], max(work["bytes"] / (hardware["hbm_tb_s"] * 1e12), 2e-6))
        records.append({"benchmark": name, "op_class": "elementwise", "dtype": dtype, **work, **timing_fields(timing)})
        log(f"{name:<30} {'':<28} {timing.time_us:10.1f} us")
    return records


def timing_fields(timing) -> dict:
    """A LoopTiming as measurement fields; where the bench had two forms, which one was kept and the other's time."""
    fields = {"time_us": timing.time_us, "spread": timing.spread, "timing": "xla_fori_loop",
              "repetitions": timing.repetitions, "copies": timing.copies, "loop_overhead_us": timing.loop_overhead_us}
    return {**fields, "form": timing.form, "other_form_us": timing.other_us} if timing.form else fields


def _point_label(point: dict) -> str:
    return f"{point['mode']} b={point['batch']} s={point['seq_len']} kv={point['kv_len']}"


def environment() -> dict:
    import jax
    import jaxlib

    return {"date": datetime.date.today().isoformat(), "device": jax.devices()[0].device_kind,
            "platform": jax.default_backend(), "host": platform.node(), "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__}


def hardware_named(name: str | None, device_kind: str, cpu: bool) -> dict:
    """conf/hardware/<name>.yaml: named, or guessed from the device (h200/h100), cpu off GPU."""
    if name is None:
        kind = device_kind.upper()
        name = "cpu" if cpu else next((n for n in ("h200", "h100", "a100") if n.upper() in kind), None)
        if name is None:
            raise SystemExit(f"no conf/hardware file for {device_kind!r}; pass --hardware NAME")
    return {**read_hardware_file(REPO_ROOT / f"conf/hardware/{name}.yaml"), "efficiency_table": None}


def timing_session(hardware_name: str | None, plan: dict, log) -> tuple[dict, dict, object]:
    """How every xla timing run starts: the device, its conf/hardware entry, a loop timer (warmed up on a GPU)."""
    import jax

    from framework.backends.maxtext.benchmarks.xla_kernels import LoopTimer

    cpu = jax.default_backend() == "cpu"
    env = environment()
    hardware = hardware_named(hardware_name, env["device"], cpu)
    log(f"{env['device']} ({env['platform']}), jax {env['jax']}, hardware={hardware['name']}")
    timer = LoopTimer(cpu, plan["repeats"], plan["target_s"])
    if not cpu:
        timer.warm_up()
    return env, hardware, timer


def main(argv: list[str] | None = None) -> dict:
    from sims.benchmarks.torch_fused import markdown, summarise

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the JSON and Markdown files (required unless --repredict)")
    parser.add_argument("--tiny", action="store_true", help="tiny models and shapes (a CPU check, seconds)")
    parser.add_argument("--hardware", default=None, help="conf/hardware name (default: from the device)")
    parser.add_argument("--models", default=None,
                        help="comma-separated conf/model names to calibrate instead of the plan's "
                             "(e.g. a size the tables lack)")
    parser.add_argument("--repredict", nargs="+", default=None, metavar=("TABLE", "ACCURACY_JSON"),
                        help="no GPU: a table, then saved runs' accuracy.json; their held-out whole steps "
                             "predicted with it")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds the calibration part may take (default: 280 on a GPU, none with --tiny)")
    args = parser.parse_args(argv)
    if args.repredict:
        missing = [path for path in args.repredict if not Path(path).is_file()]
        if len(args.repredict) < 2 or missing:
            parser.error(f"--repredict takes a table, then one or more accuracy.json files"
                         f"{'; no such file: ' + ', '.join(missing) if missing else ''}")
        return repredict(args.repredict[0], args.repredict[1:])
    if not args.out:
        parser.error("--out is required (a folder for the measurements, the table and the accuracy report)")
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    plan = TINY if args.tiny else FULL
    if args.models:
        known = sorted(path.stem for path in (REPO_ROOT / "conf" / "model").glob("*.yaml"))
        unknown = [name for name in args.models.split(",") if name not in known]
        if unknown:
            parser.error(f"--models: {', '.join(unknown)} not in conf/model; valid: {', '.join(known)}")
        plan = with_models(plan, args.models.split(","))
    env, hardware, timer = timing_session(args.hardware, plan, log)
    budget = args.budget_s or plan["budget_s"]
    measurements = []
    for i, (name, (conf_name, layers)) in enumerate(plan["models"].items(), 1):
        log(f"calibration: {name}")
        deadline = started + budget * i / len(plan["models"])  # each model its share of the budget
        measurements += measure(model_config(conf_name, layers), hardware, plan, timer, env["platform"], log, deadline)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "microbench.json").write_text(json.dumps(measurements, indent=1))
    table = out / f"{hardware['name']}_{STACK}.json"
    source = (f"framework.backends.maxtext.benchmarks.xla_calibrate on {env['device']}, jax {env['jax']}, "
              f"{env['date']}, timed in compiled fori_loops")
    dtype = "bf16" if plan["dtype"] == "bfloat16" else "fp32"
    fitted = fit_table(measurements, hardware, source=source, stack=STACK)
    save_table(fitted, table)
    for op, eff in {**fitted.op_classes, **fitted.ops}.items():
        print(f"{op:<30} compute {eff.compute:.3f}  memory {eff.memory:.3f}  floor {eff.floor_us:.1f} us")
    log(f"wrote {table} ({len(measurements)} measurements)")
    cases, unrolled, models = [], [], {}
    for name, (conf_name, layers), workloads in plan["held_out"]:
        models[name] = model_config(conf_name, layers)
        for case in whole_steps(name, models[name], workloads, plan, hardware, timer, env["platform"], log, out):
            (cases if case["held_out"] else unrolled).append({**case, "model": name})
    predict(cases, models, hardware, str(table), dtype)
    report = {"environment": env, "hardware": hardware, "models": models, "stack": STACK, "table": str(table),
              "dtype": dtype,
              "summary": summarise(cases), "cases": cases,
              "unrolled_prefill": unrolled, "seconds": time.perf_counter() - started}
    (out / "accuracy.json").write_text(json.dumps(report, indent=1))
    text = markdown(report) + scan_lines(cases, unrolled)
    (out / "accuracy.md").write_text(text)
    print(text)
    log(f"done, wrote {out}")
    return report


if __name__ == "__main__":
    main()
