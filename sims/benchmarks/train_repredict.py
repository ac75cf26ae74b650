"""Re-predict measured training steps with whichever simulator `sims` imports (this checkout's, or an
older one's to compare: run it from that checkout's root with PYTHONPATH set to it); JSON + Markdown.

    python -m sims.benchmarks.train_repredict --out DIR \\
        --megatron framework/backends/megatron/benchmarks/results/megatron_{1b,dp2,tp2}.json \\
        --grpo framework/backends/maxtext/benchmarks/results/h100_2026-11-26_s8_call2/layouts_4gpu.json \\
        --steps sims/benchmarks/results/h100_2026-11-26_s10_train/train_steps.json

Cases, each with the measured seconds of its file and the workload the simulator is given:
- megatron-core pretrain steps (framework/backends/megatron/benchmarks/pretrain_step.py): the
  `megatron_local_sdpa` step of the file's model, card, tp x dp, sequence, global and micro-batch,
  stack megatron_local;
- a maxtext GRPO update (grpo_layouts.py's `one_device` layout), `update_s`, stack xla, twice: as the
  preflight simulated it before commit ce74ef1 (prompts x generations / micro_batch training steps of
  micro_batch sequences of prompt + new tokens, each with its own optimizer step) and as the update runs
  and the preflight now simulates it (one step whose gradients accumulate over those micro-batches, one
  optimizer step);
- held-out steps of sims.benchmarks.train_steps (stack torch_fused), with the hardware file's table.
Only `sims.simulate` is used, so an older checkout runs it unchanged.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import yaml

from sims import simulate


def conf(group: str, name: str, root: Path) -> dict:
    return yaml.safe_load((root / f"conf/{group}/{name}.yaml").read_text())


def megatron_cases(files: list[str], root: Path) -> list[dict]:
    cases = []
    for name in files:
        record = json.loads(Path(name).read_text())
        tp, dp = record["layout"]["tp"], record["layout"]["dp"]
        micro_batches = record["global_batch"] // (record["micro_batch"] * dp)
        cases.append({
            "name": f"megatron-core {record['model']} seq {record['seq']} batch {record['global_batch']} "
                    f"(micro {record['micro_batch']}) tp={tp} dp={dp}, {record['device']}",
            "measured_s": record["results"]["megatron_local_sdpa"]["step_s"], "repeats": 1,
            "model": conf("model", record["model"], root)["hf_config"], "hardware": record["hardware"],
            "layout": {"tp": tp, "dp": dp}, "stack": "megatron_local",
            "workload": {"mode": "train", "batch": record["global_batch"], "seq_len": record["seq"],
                         "microbatches": micro_batches, "dtype": "bf16"}})
    return cases


def grpo_cases(files: list[str], root: Path) -> list[dict]:
    cases = []
    for name in files:
        record = json.loads(Path(name).read_text())
        run = record["layouts"]["one_device"]
        rows = run["prompts"] * run["generations"]
        micro_steps = rows // run["micro_batch"]
        base = {"measured_s": run["update_s"], "model": conf("model", run["model"], root)["hf_config"],
                "hardware": record["hardware"], "layout": {}, "stack": "xla"}
        label = (f"maxtext GRPO update {run['model']} {rows} x {run['prompt_tokens'] + run['new_tokens']} tokens "
                 f"in micro-batches of {run['micro_batch']}, {record['device']}")
        workload = {"mode": "train", "dtype": "bf16", "seq_len": run["prompt_tokens"] + run["new_tokens"]}
        cases.append({**base, "name": f"{label}: one optimizer step per micro-batch (the old preflight, {micro_steps} steps)",
                      "repeats": micro_steps, "workload": {**workload, "batch": run["micro_batch"]}})
        cases.append({**base, "name": f"{label}: as it runs and the preflight asks (one step of {micro_steps} micro-batches)",
                      "repeats": 1, "workload": {**workload, "batch": rows, "microbatches": micro_steps}})
    return cases


def held_out_cases(files: list[str], root: Path) -> list[dict]:
    cases = []
    for name in files:
        record = json.loads(Path(name).read_text())
        for case in record["cases"]:
            if "time_us" not in case:
                continue
            cfg = conf("model", case["model"], root)["hf_config"]
            cases.append({"name": f"{case['name']}, {record['environment']['device']} (held out)",
                          "measured_s": case["time_us"] * 1e-6, "repeats": 1,
                          "model": {**cfg, "num_hidden_layers": case["layers"] or cfg["num_hidden_layers"]},
                          "hardware": record["hardware"], "layout": {"tp": 1}, "stack": "torch_fused",
                          "workload": case["workload"]})
    return cases


def predict(cases: list[dict], root: Path) -> list[dict]:
    rows = []
    for case in cases:
        hardware = conf("hardware", case["hardware"], root)["hardware"]
        result = simulate(case["model"], hardware, case["layout"], case["workload"], stack=case["stack"])
        predicted = result.latency_s * case["repeats"]
        rows.append({"name": case["name"], "measured_s": case["measured_s"], "predicted_s": predicted,
                     "error": (predicted - case["measured_s"]) / case["measured_s"], "stack": case["stack"],
                     "breakdown_s": {r["name"]: r["time_s"] * case["repeats"] for r in result.breakdown_rows()
                                     if r["name"] in ("cross_entropy", "grad_accumulate", "optimizer_step",
                                                      "attention", "lm_head", "mlp_gate_up_proj", "host_dispatch_wait")}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for repredicted.json and .md")
    parser.add_argument("--label", default="predicted", help="what these predictions are (file names, heading)")
    parser.add_argument("--megatron", nargs="*", default=[], help="pretrain_step.py JSON files")
    parser.add_argument("--grpo", nargs="*", default=[], help="grpo_layouts.py JSON files")
    parser.add_argument("--steps", nargs="*", default=[], help="train_steps.json files")
    args = parser.parse_args()
    root = Path.cwd()
    cases = megatron_cases(args.megatron, root) + grpo_cases(args.grpo, root) + held_out_cases(args.steps, root)
    rows = predict(cases, root)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.label}.json").write_text(json.dumps(rows, indent=1))
    lines = [f"| step | measured (s) | {args.label} (s) | error |", "|---|---|---|---|"]
    lines += [f"| {r['name']} | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | {r['error']:+.1%} |" for r in rows]
    lines.append(f"\nmedian abs. error {statistics.median(abs(r['error']) for r in rows):.1%}")
    (out / f"{args.label}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
