"""Dump summaries and rows over the speed sweep (4 models x 3 modes x dtype/zero/recompute variants), to compare two code versions."""
import pickle, sys, yaml
from sims import simulate
from sims.hardware import read_hardware_file
from sims.benchmarks.speed import sweep_points, WORKLOADS, REPO, MODELS
out = []
for table in (None, "sims/calibration/tables/h100.json"):
    hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"] = table; hardware["nodes"] = 2
    for model in MODELS:
        hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for w in WORKLOADS:
            variants = [{}, {"dtype": "fp8"}, {"dtype": "fp32"}] + ([{"zero": True}, {"recompute": True}] if w["mode"] == "train" else [])
            for v in variants:
                if table and v: continue
                for layout, batch in sweep_points():
                    r = simulate(hf, hardware, layout, {**w, "batch": batch, **v})
                    out.append(((table, model, w["mode"], tuple(v.items()), tuple(layout.items()), batch), r.summary(), r.breakdown_rows() if r.status == "ok" else []))
pickle.dump(out, open(sys.argv[1], "wb"))
print(len(out), "configurations")
