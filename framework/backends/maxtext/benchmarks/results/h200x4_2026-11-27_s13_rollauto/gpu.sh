#!/usr/bin/env bash
# Issue 14, helper rollauto: parallel.rollout.devices=auto (the preflight picks the split) against the 2 | 2 setting,
# the GRPO recipe as a user types it on a 4-GPU machine (H100 or H200), 4 steps each, one step off-policy.
# Estimate: ~70 s for the first run (random-init model build + compiles on a fresh machine), ~40 s for the second
# (model and compilation caches filled): under 3 minutes. Each command under `timeout`.
# CPU check of the logic:  CPU_CHECK=1 OUT=/tmp/rollauto_check bash gpu.sh   (tiny model, 4 host devices)
set -u
if [ "${CPU_CHECK:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/rollauto_check}; export JAX_PLATFORMS=cpu
  RUN="recipe=grpo_arithmetic_cpu hardware=cpu grpo.preflight=true hardware.intra_node_gb_s=20 progress=false grpo.steps=4"
  TWO="parallel.fsdp=2"  # on CPU the host is split into the devices the layout names: fsdp -1 would take 1
else
  source .gpu/env.sh
  TWO=""
  RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=4"
fi
R=$OUT/results/rollauto; mkdir -p $R
cp "$0" $R/gpu.sh 2>/dev/null
[ "${CPU_CHECK:-0}" = 1 ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
LAG1="hardware.devices_per_node=4 grpo.rollout_lag=1 parallel.rollout.placement=separate"
report() {  # the choice, the predicted and measured step times of run $1
grep -h "auto candidate\|auto ->\|preflight:\|rollout mesh\|grpo: mesh" $R/$1.log | sed 's/^\[[^]]*\]\[[^]]*\]\[INFO\] - //' | cut -c1-260 | tee -a $R/summary.txt
python3 - "$R/$1" "$1" <<'PY' 2>&1 | tee -a $R/summary.txt
import json, sys
run, name = sys.argv[1], sys.argv[2]
s = json.load(open(f"{run}/summary.json")); m = s["result"]["metrics"]
keys = ("layout_search_choice", "layout_search_rollout_devices", "layout_search_rollout_tp", "micro_batch_size", "remat",
        "measured_step_s", "preflight_predicted_step_s", "preflight_rollout_memory_gb", "preflight_update_memory_gb",
        "aot_fallbacks", "staleness", "ratio_abs_deviation")
print(name, "status", s["result"].get("status"), {k: (round(m[k], 4) if isinstance(m.get(k), float) else m.get(k)) for k in keys if k in m})
if m.get("measured_step_s") and m.get("preflight_predicted_step_s"):
    print(name, "measured / predicted", round(m["measured_step_s"] / m["preflight_predicted_step_s"], 3))
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
print(name, "steps (step, step_s, rollout_s, update_s, reshard_s, wait_s, staleness)",
      [(r["step"], round(r["step_time_s"], 3), round(r["rollout_time_s"], 3), round(r["update_time_s"], 3),
        round(r.get("reshard_time_s", 0), 4), round(r.get("rollout_wait_time_s", 0), 3), r.get("staleness")) for r in rows])
PY
rm -rf $R/$1/checkpoints $R/$1/hf_export
}
echo "== auto $((SECONDS-T0)) s" | tee -a $R/summary.txt
timeout 150 python3 run.py $RUN $LAG1 parallel.rollout.devices=auto hydra.run.dir=$R/auto > $R/auto.log 2>&1
echo "auto rc=$? $((SECONDS-T0)) s" | tee -a $R/summary.txt; report auto
echo "== 2|2 rollout dp=2 $((SECONDS-T0)) s" | tee -a $R/summary.txt
timeout 110 python3 run.py $RUN $LAG1 parallel.rollout.devices=2 parallel.rollout.dp=2 parallel.rollout.tp=1 $TWO hydra.run.dir=$R/two_two > $R/two_two.log 2>&1
echo "two_two rc=$? $((SECONDS-T0)) s" | tee -a $R/summary.txt; report two_two
tail -n 5 $R/*.log > $R/log_tails.txt
echo "done $((SECONDS-T0)) s" | tee -a $R/summary.txt
