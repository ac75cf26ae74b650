"""Dump summaries and rows over the speed sweep (4 models x 3 modes x dtype/zero/recompute variants, built-in factors
and the calibrated H100 table: 7,168 configurations), to compare two code versions. Each sweep of 128 layouts goes
through simulate_many where the tree has it (python dump.py OUT.pkl), or through one simulate call per layout
(python dump.py OUT.pkl --per-layout, and always in a tree without simulate_many)."""
import pickle, sys, yaml
import sims
from sims import simulate
from sims.hardware import read_hardware_file
from sims.benchmarks.speed import sweep_points, WORKLOADS, REPO, MODELS
many = getattr(sims, "simulate_many", None) if "--per-layout" not in sys.argv else None
out = []
for table in (None, "sims/calibration/tables/h100.json"):
    hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"] = table; hardware["nodes"] = 2
    for model in MODELS:
        hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for w in WORKLOADS:
            variants = [{}, {"dtype": "fp8"}, {"dtype": "fp32"}] + ([{"zero": True}, {"recompute": True}] if w["mode"] == "train" else [])
            for v in variants:
                if table and v: continue
                points = [(layout, {**w, "batch": batch, **v}) for layout, batch in sweep_points()]
                if many:
                    results = many(hf, hardware, [l for l, _ in points], [p for _, p in points])
                else:
                    results = [simulate(hf, hardware, l, p) for l, p in points]
                for (layout, point), r in zip(points, results):
                    out.append(((table, model, w["mode"], tuple(v.items()), tuple(layout.items()), point["batch"]), r.summary(), r.breakdown_rows() if r.status == "ok" else []))
pickle.dump(out, open(sys.argv[1], "wb"))
print(len(out), "configurations,", "simulate_many" if many else "simulate per layout")
