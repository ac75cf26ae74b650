"""Session 14: the GRPO layouts measured with the rollout on the FSDP mesh (`fsdp*_rollout_same`, beside the
other layouts of the same calls), and this session's sampler calls (probe.py: one generate of the same rows on
fsdp=N and on dp=N, 2 and 4 x H200), re-predicted by the preflight with the card's shipped xla table (a sampler
call against the predicted rollout: prefill + decode). Held-out: no constant of the model is fitted to these
runs. Run from a checkout's root (the model under test is its sims/):
    PYTHONPATH=. python <this file> OUTDIR LABEL                 # writes OUTDIR/LABEL.json
    python <this file> --compare OUTDIR/before.json OUTDIR/after.json   # measured / predicted, before -> after
"""
import json
import sys
from pathlib import Path

R = "framework/backends/maxtext/benchmarks/results/"
TABLES = {"h100": "sims/calibration/tables/h100_xla.json", "h200": "sims/calibration/tables/h200_xla.json"}
FILES = ["h100_2026-11-26_s8_call2/layouts_2gpu.json", "h100_2026-11-26_s8_call2/layouts_4gpu.json",
         "h200_2026-11-26_s8_call1/layouts_2gpu.json", "h200x2_2026-11-26_s9_call4/layouts_2gpu.json",
         "h200_2026-11-26_s8_call3/layouts_1_5b.json"]
PHASES = ("rollout_s", "update_s", "step_s")
PROBES = ["h200x2_fsdp2", "h200x4_fsdp4_a", "h200x4_fsdp4_b"]  # folders beside this file
SHAPES = {"model": "qwen2_5_0_5b_instruct", "prompts": 16, "generations": 8, "prompt_tokens": 256, "new_tokens": 256,
          "micro_batch": 16, "dtype": "bfloat16", "remat": "none"}


def rows() -> list[dict]:
    from framework.backends.maxtext.benchmarks.xla_repredict import phases, runs

    out = []
    for name in FILES:
        for label, report in runs(Path(R + name)):
            predicted = phases(report, TABLES[report["hardware"]])
            # session 8's 2 x H200 split layouts: a step of 2.6-2.8 s around 0.85 s of phases (a slow weight move)
            phases_s = report["rollout_s"] + report["update_s"] + report.get("reshard_s", 0.0)
            keep = abs(report["step_s"] - phases_s) < 0.05 * report["step_s"]
            out.append({"run": label, "hardware": report["hardware"], "devices": report.get("devices", 1),
                        "model": report["model"], "measured": {k: report[k] for k in PHASES},
                        "predicted": predicted, "step_compared": keep})
    return out + probe_rows(phases)


def probe_rows(phases) -> list[dict]:
    """A sampler call per mesh of each probe folder: measured generate seconds (the median of 3 after the compile)
    against the predicted rollout with both meshes the same (nothing to move)."""
    out = []
    for folder in PROBES:
        for mesh in ("fsdp", "dp"):
            probe = json.loads((Path(__file__).parent / folder / f"{mesh}.json").read_text())
            devices = probe["n"]
            axes = {"data": 1, "fsdp": devices} if mesh == "fsdp" else {"data": devices, "fsdp": 1}
            layout = {**axes, "expert": 1, "tensor": 1}
            report = {**SHAPES, "hardware": "h200", "devices": devices, "update_mesh": layout, "rollout_mesh": layout}
            measured = sorted(probe["t"][1:])[1]
            predicted = phases(report, TABLES["h200"])
            out.append({"run": f"{folder} sampler {mesh}{devices}", "hardware": "h200", "devices": devices,
                        "model": SHAPES["model"], "measured": {"rollout_s": measured, "update_s": float("nan"),
                                                               "step_s": float("nan")},
                        "predicted": predicted, "step_compared": False})
    return out


def compare(before: list[dict], after: list[dict]) -> str:
    lines = ["| run | GPUs | measured rollout / step (s) | rollout measured/predicted: before -> after | "
             "step: before -> after |", "|---|---|---|---|---|"]
    for old, new in zip(before, after):
        assert old["run"] == new["run"]
        m = old["measured"]
        ratio = {k: [m[k] / r["predicted"][k] for r in (old, new)] for k in ("rollout_s", "step_s")}
        step = f"{ratio['step_s'][0]:.2f} -> {ratio['step_s'][1]:.2f}" if old["step_compared"] else "-"
        lines.append(f"| {old['run']} | {old['devices']} x {old['hardware']} | {m['rollout_s']:.3f} / {m['step_s']:.3f} | "
                     f"{ratio['rollout_s'][0]:.2f} -> {ratio['rollout_s'][1]:.2f} | {step} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__" and sys.argv[1] == "--compare":
    print(compare(*(json.loads(Path(f).read_text()) for f in sys.argv[2:4])))
elif __name__ == "__main__":
    out, label = Path(sys.argv[1]), sys.argv[2]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{label}.json").write_text(json.dumps(rows(), indent=1))
