"""Re-predict measured GRPO steps with the preflight, built-in factors against an `xla` efficiency table.

    python -m framework.backends.maxtext.benchmarks.xla_repredict --table sims/calibration/tables/h100_xla.json \\
        --out DIR framework/backends/maxtext/benchmarks/results/h100_2026-11-26_s9_call10/ours.json ...

Each file is a grpo_step report (one device), a grpo_layouts report (every layout in it) or a `python run.py`
run's summary.json (its meshes from shardings.json; a rollout on devices of its own, parallel.rollout.placement
separate, predicted overlapped with the update over its grpo.rollout_lag groups, as the preflight does; its decode
with the repeated prompt cache: runs whose sampler shared the prompt, backend.adapter.shared_prefix, are not told
apart); the task is
rebuilt from the report's shapes (benchmarks/grpo_step.grpo_task) and the preflight (trainers/preflight.py:
predict_step) predicts it on the report's hardware with `efficiency_table.xla` = null and = --table.
By phase: rollout = prefill + decode, update = train (+ the extra forward passes: a run's beta > 0, or ppo_epochs > 1
on-policy; grpo_step and grpo_layouts reports run none);
the resharding between layouts is the report's own preflight_reshard_s (bytes / link, no table).
Writes repredict.json and repredict.md to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from pathlib import Path

from framework.core.paths import load_conf

MESH_TO_AXES = {"data": "dp", "fsdp": "fsdp", "tensor": "tp", "expert": "ep"}
# what a report must give: the shapes phases() rebuilds the task from and the measured phases
REPORT_KEYS = ("model", "hardware", "prompts", "generations", "prompt_tokens", "new_tokens", "micro_batch", "dtype",
               "rollout_s", "update_s", "step_s")
VALID_FILES = "valid: a grpo_step or grpo_layouts JSON report, or a `python run.py` GRPO run's summary.json"


class ReportError(ValueError):
    """A file that is not a measured report: one line for the command line."""


def runs(path: Path, remat: str | None = None) -> list[tuple[str, dict]]:
    """(label, report) of every measured step in a raw file (the last JSON object of the file), or of a
    `python run.py` GRPO run's summary.json (beside its config.yaml and metrics.jsonl). `remat`: the policy
    the run used where the file does not say (grpo_layouts files before session 10 kept it only in call.sh)."""
    if path.name == "summary.json":
        return [(f"{path.parent.parent.name}/{path.parent.name}", run_report(path.parent))]
    text = path.read_text()
    report = json.loads(text[text.rfind("\n{") + 1:] if not text.lstrip().startswith("{") else text)
    if not isinstance(report, dict):
        raise ReportError(f"{path}: a JSON {type(report).__name__}, not a report; {VALID_FILES}")
    if "layouts" in report:
        shared = {"hardware": report["hardware"], "remat": report.get("remat", remat or "none")}
        return [(f"{path.parent.name}/{path.stem} {name}", {**layout, **shared})
                for name, layout in report["layouts"].items() if "step_s" in layout]
    return [(f"{path.parent.name}/{path.stem}", {"remat": remat or "none", **report})]


def read_runs(file: str, remat: str | None) -> list[tuple[str, dict]]:
    """runs(file), each report with every key of REPORT_KEYS; ReportError naming the file otherwise."""
    try:
        found = runs(Path(file), remat)
    except OSError as error:
        raise ReportError(f"{error.filename or file}: cannot read it ({error.strerror})") from error
    except json.JSONDecodeError as error:
        raise ReportError(f"{file}: not JSON ({error.msg}, line {error.lineno}); {VALID_FILES}") from error
    except KeyError as error:
        raise ReportError(f"{file}: no {error} in it; {VALID_FILES}") from error
    if not found:
        raise ReportError(f"{file}: no measured step in it (no layout with step_s); {VALID_FILES}")
    for label, report in found:
        if missing := [key for key in REPORT_KEYS if key not in report]:
            raise ReportError(f"{file}: {label} has no {', '.join(missing)}; {VALID_FILES}")
    return found


def run_report(run_dir: Path) -> dict:
    """A GRPO run's shapes (its config.yaml), meshes (its shardings.json) and phase times (the median over steps
    after the first, which compiles) in a grpo_step report's keys. A run whose rollout decodes on devices of its
    own (parallel.rollout.placement=separate) also gives how many per group and the groups (grpo.rollout_lag)."""
    from omegaconf import OmegaConf

    summary = json.loads((run_dir / "summary.json").read_text())
    if summary["world_size"] != 1:
        raise SystemExit(f"{run_dir}: only single-process runs are re-predicted from a summary")
    config = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    grpo, metrics = config["grpo"], summary["result"]["metrics"]
    if not (run_dir / "shardings.json").exists():
        raise SystemExit(f"{run_dir}: no shardings.json (the run's meshes); cannot tell its layout")
    meshes = json.loads((run_dir / "shardings.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timed = [row for row in steps if "step_time_s" in row][1:]
    measured = {phase: statistics.median(row[f"{phase[:-2]}_time_s"] for row in timed)
                for phase in ("rollout_s", "update_s", "step_s")}
    report = {"model": summary["model"], "hardware": summary["hardware"], "devices": math.prod(meshes["mesh"].values()),
              "update_mesh": meshes["mesh"], "rollout_mesh": meshes["rollout_mesh"],
              "prompts": grpo["prompts_per_step"], "generations": grpo["num_generations"],
              "prompt_tokens": grpo["max_prompt_tokens"], "new_tokens": grpo["max_new_tokens"],
              "micro_batch": metrics["micro_batch_size"], "dtype": grpo["compute_dtype"],
              "remat": metrics.get("remat", config["backend"]["adapter"]["remat"]),
              "shared_prefix": bool(metrics.get("shared_prefix", False)), **measured,  # recorded since session 17
              # the extra forward passes the preflight prices (old log-probs on-policy, the reference's)
              "beta": grpo.get("beta", 0.0), "ppo_epochs": grpo.get("ppo_epochs", 1),
              "rollout_lag": grpo.get("rollout_lag", 0)}
    if (config["parallel"].get("rollout") or {}).get("placement") == "separate":
        groups = max(1, grpo.get("rollout_lag", 0))
        report.update(rollout_groups=groups, rollout_devices=math.prod(meshes["rollout_mesh"].values()))
    else:  # the weights' move between two layouts on the same devices: the run's own figure (bytes / link)
        report["preflight_reshard_s"] = metrics.get("preflight_reshard_s", 0.0)
    return report


def parallel_of(mesh: dict | None):
    from framework.core.parallel import ParallelConfig

    axes = {MESH_TO_AXES[k]: v for k, v in (mesh or {"data": 1, "fsdp": 1, "tensor": 1, "expert": 1}).items()}
    return ParallelConfig(**{"dp": 1, "fsdp": 1, "tp": 1, "pp": 1, "ep": 1, "cp": 1, **axes})


def phases(report: dict, table: str | None) -> dict:
    """Predicted rollout, update and step seconds of one measured report with `table` (None: built-in)."""
    from framework.backends.maxtext.benchmarks.grpo_step import grpo_task
    from framework.backends.maxtext.trainers.preflight import predict_step

    args = argparse.Namespace(prompts=report["prompts"], generations=report["generations"],
                              prompt_tokens=report["prompt_tokens"], new_tokens=report["new_tokens"],
                              micro_batch=report["micro_batch"], dtype=report["dtype"])
    hardware = {**load_conf("hardware", report["hardware"])["hardware"]}
    hardware["efficiency_table"] = {**hardware["efficiency_table"], "xla": table}
    update, rollout_layout = parallel_of(report.get("update_mesh")), parallel_of(report.get("rollout_mesh"))
    hf_config = load_conf("model", report["model"])["hf_config"]
    task = dataclasses.replace(grpo_task(args), **{key: report[key] for key in ("beta", "ppo_epochs", "rollout_lag")
                                                   if key in report})  # a run's; benchmark reports run none
    separate = {}
    if "rollout_groups" in report:  # decoding on devices of its own while the update trains: the preflight's overlap
        separate = {"reshard_bytes": moved_bytes(hf_config, task, report["update_mesh"], report["rollout_mesh"]),
                    "rollout_devices": report["rollout_devices"], "rollout_groups": report["rollout_groups"]}
    prediction = predict_step(hf_config, hardware, update, report.get("devices", 1), task, rollout_layout,
                              remat=report.get("remat", "none"), shared_prompt=report.get("shared_prefix", False),
                              **separate)
    rollout = prediction["preflight_prefill_s"] + prediction["preflight_decode_s"]
    update_s = prediction["preflight_train_s"] + prediction.get("preflight_forward_s", 0.0)
    step = prediction["preflight_predicted_step_s"] if separate else rollout + update_s + report.get(
        "preflight_reshard_s", 0.0)
    return {"rollout_s": rollout, "update_s": update_s, "step_s": step}


def moved_bytes(hf_config: dict, task, update_mesh: dict, rollout_mesh: dict) -> float:
    """What each rollout device receives per step (as the layout search counts it for a separate rollout)."""
    from flax import linen as nn

    from framework.backends.maxtext.models import ModelConfig, Transformer, abstract_params
    from framework.backends.maxtext.sharding import tree_bytes
    from framework.backends.maxtext.trainers.preflight import reshard_bytes_per_device
    from framework.backends.maxtext.trainers.rollout_plan import rollout_weight_bytes

    model = ModelConfig.from_hf_config(hf_config, param_dtype=task.param_dtype, dtype=task.compute_dtype)
    weight_bytes = tree_bytes(nn.unbox(abstract_params(Transformer(model))))
    return reshard_bytes_per_device(rollout_weight_bytes(model, weight_bytes), update_mesh, rollout_mesh, separate=True)


def repredict(files: list[str], table: str, remat_of: dict[str, str] | None = None) -> dict:
    rows = []
    for file in files:
        for label, report in read_runs(file, (remat_of or {}).get(file)):
            row = {"run": label, "model": report["model"], "device": report.get("device"),
                   "devices": report.get("devices", 1),
                   "micro_batch": report["micro_batch"], "remat": report.get("remat", "none"),
                   "measured": {k: report[k] for k in ("rollout_s", "update_s", "step_s")}}
            for name, setting in (("built_in", None), ("table", table)):
                predicted = phases(report, setting)
                row[name] = predicted
                row[f"{name}_error"] = {k: (predicted[k] - report[k]) / report[k] for k in predicted}
            rows.append(row)
    summary = {name: {phase: statistics.median(abs(r[f"{name}_error"][phase]) for r in rows)
                      for phase in ("rollout_s", "update_s", "step_s")} for name in ("built_in", "table")}
    return {"table": table, "rows": rows, "median_abs_error": summary}


def markdown(result: dict) -> str:
    lines = ["| run | mb, remat | measured rollout / update / step (s) | built-in: rollout / update / step | "
             "table: rollout / update / step |", "|---|---|---|---|---|"]
    for r in result["rows"]:
        cells = [" / ".join(f"{r['measured'][k]:.3f}" for k in ("rollout_s", "update_s", "step_s"))]
        for name in ("built_in", "table"):
            cells.append(" / ".join(f"{r[name][k]:.3f} ({r[f'{name}_error'][k]:+.0%})"
                                    for k in ("rollout_s", "update_s", "step_s")))
        lines.append(f"| {r['run']} ({r['devices']} GPU) | {r['micro_batch']}, {r['remat']} | {' | '.join(cells)} |")
    lines += ["", "| median abs. error | rollout | update | step |", "|---|---|---|---|"]
    for name, s in result["median_abs_error"].items():
        lines.append(f"| {name} | {s['rollout_s']:.1%} | {s['update_s']:.1%} | {s['step_s']:.1%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="grpo_step / grpo_layouts JSON reports")
    parser.add_argument("--table", required=True, help="the xla efficiency table to compare with the built-in factors")
    parser.add_argument("--out", required=True, help="folder for repredict.json and repredict.md")
    parser.add_argument("--remat-of", action="append", default=[], metavar="FILE=POLICY",
                        help="the remat policy a file's run used where the file does not record it (its call.sh does)")
    args = parser.parse_args(argv)
    if bad := [item for item in args.remat_of if "=" not in item]:
        parser.error(f"--remat-of: {bad[0]!r} has no '='; valid: FILE=POLICY (a policy of backend.adapter.remat)")
    if not Path(args.table).is_file():
        parser.error(f"--table: {args.table} is not a file; valid: an xla efficiency table "
                     "(sims/calibration/tables/*_xla.json)")
    try:
        result = repredict(args.files, args.table, dict(item.split("=", 1) for item in args.remat_of))
    except ReportError as error:
        parser.error(str(error))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "repredict.json").write_text(json.dumps(result, indent=1))
    (out / "repredict.md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
