#!/usr/bin/env bash
# Issue 14, helper lag: grpo.rollout_lag=L with L rollout groups against lag 1 and one GPU, the GRPO recipe as a
# user types it on ONE 4-GPU machine (H100 or H200; Qwen2.5-0.5B random init, 16 prompts x 8, 256+256 tokens),
# 6 steps each (measured_step_s: the median of steps 2..6). Run from the repo root of branch wt-lag (or main after
# the merge), with .gpu/env.sh as in session 13 (carried wheels, HW=h100|h200).
# Runs (predictions of the preflight on 4 x H200 / 4 x H100, CPU, this branch):
#   one_gpu      1 GPU, on-policy                                   (measured s13 H200: 0.826 s)
#   lag1_auto    lag 1, devices auto -> 2 | 2, rollout dp=2          predicted 0.369 / 0.385 s (measured s13 H200: 0.368 s)
#   lag2_2x1     lag 2, 2 rollout groups of 1 GPU | update fsdp=2   predicted 0.218 / 0.245 s (the search's pick for L=2)
#   lag2_auto    lag 2, devices auto (must pick r2_g2_tp1_dp1 = lag2_2x1; checks the search on the GPU)
#   lag3_3x1     lag 3, 3 rollout groups of 1 GPU | update on 1     predicted 0.410 / 0.464 s (update-bound: a contrast)
# Estimate: ~60-70 s per run on a warm cache, the first ~90 s: about 6 minutes. Each command under `timeout`.
# CPU check of the logic:  CPU_CHECK=1 OUT=/tmp/lag_check bash /work/wt/results/lag/gpu.sh   (tiny model, host devices)
set -u
if [ "${CPU_CHECK:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/lag_check}; export JAX_PLATFORMS=cpu
  RUN="recipe=grpo_arithmetic_cpu hardware=cpu grpo.preflight=true hardware.intra_node_gb_s=20 progress=false grpo.steps=4"
  TWO="parallel.fsdp=2"  # on CPU the host is split into the devices the layout names: fsdp -1 would take 1
else
  source .gpu/env.sh
  TWO=""
  RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=8"
fi
R=$OUT/results/lag; mkdir -p $R; trap "tar czf $OUT/lag.tgz -C $OUT/results lag" EXIT
cp "$0" $R/gpu.sh 2>/dev/null
cp .gpu/lag.commit $R/commit.txt
[ "${CPU_CHECK:-0}" = 1 ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
SEP="hardware.devices_per_node=4 parallel.rollout.placement=separate"
report() {  # the choice, the predicted and measured step times of run $1
grep -h "auto candidate\|auto ->\|preflight:\|rollout mesh\|grpo: mesh" $R/$1.log | sed 's/^\[[^]]*\]\[[^]]*\]\[INFO\] - //' | cut -c1-260 | tee -a $R/summary.txt
python3 - "$R/$1" "$1" <<'PY' 2>&1 | tee -a $R/summary.txt
import json, sys
run, name = sys.argv[1], sys.argv[2]
s = json.load(open(f"{run}/summary.json")); m = s["result"]["metrics"]
keys = ("layout_search_choice", "layout_search_rollout_devices", "rollout_groups", "micro_batch_size", "remat",
        "measured_step_s", "preflight_predicted_step_s", "preflight_rollout_memory_gb", "preflight_update_memory_gb",
        "aot_fallbacks", "staleness", "ratio_abs_deviation", "clip_fraction")
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
go() {  # $1 name, $2 timeout, the rest: overrides
name=$1; limit=$2; shift 2
echo "== $name $((SECONDS-T0)) s" | tee -a $R/summary.txt
timeout $limit python3 run.py $RUN "$@" hydra.run.dir=$R/$name > $R/$name.log 2>&1
echo "$name rc=$? $((SECONDS-T0)) s" | tee -a $R/summary.txt; report $name
}
CUDA_VISIBLE_DEVICES=0 go one_gpu 150 hardware.devices_per_node=1
go lag1_auto 150 $SEP grpo.rollout_lag=1 parallel.rollout.devices=auto
# go lag2_2x1 150 $SEP grpo.rollout_lag=2 parallel.rollout.devices=2 parallel.rollout.dp=1 parallel.rollout.tp=1 $TWO
go lag2_auto 150 $SEP grpo.rollout_lag=2 parallel.rollout.devices=auto
# go lag3_3x1 150 $SEP grpo.rollout_lag=3 parallel.rollout.devices=3 parallel.rollout.dp=1 parallel.rollout.tp=1
python3 - $R <<'PY' | tee -a $R/summary.txt
import json, sys
base = None
for name in ("one_gpu", "lag1_auto", "lag2_2x1", "lag2_auto", "lag3_3x1"):
    try:
        m = json.load(open(f"{sys.argv[1]}/{name}/summary.json"))["result"]["metrics"]
    except (OSError, KeyError, ValueError) as error:
        print(name, "no summary", error); continue
    step = m.get("measured_step_s"); base = base or (step if name == "one_gpu" else None)
    print(f"{name}: {step:.4g} s per step (median of steps 2..), predicted {m.get('preflight_predicted_step_s')}",
          f"-> {base / step:.2f}x one GPU" if base and step else "")
PY
tail -n 5 $R/*.log > $R/log_tails.txt
echo "done $((SECONDS-T0)) s" | tee -a $R/summary.txt
