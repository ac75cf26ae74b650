#!/usr/bin/env bash
# Issue 14, one step off-policy GRPO (branch wt-async): the GRPO step with the rollout and the update on
# DISJOINT devices at the same time (grpo.rollout_lag=1, trainers/pipeline.py) beside the synchronous
# layouts, in the same call. Qwen2.5-0.5B shapes, random weights, --micro-batch 128 --remat minimal, as
# session 11's call F. Picks the variant by the GPU count:
#   2 GPUs: one_device, rollout1_update1_lag1, fsdp2_rollout_dp2 (sync baseline)              ~4-5 min
#   4 GPUs: one_device, rollout2dp_update2fsdp_lag1, fsdp4_rollout_dp4 (then, if time is left,
#           rollout2tp_update2fsdp_lag1 and rollout1_update1_lag1, <= 150 s more)         ~5-7.5 min
# Each benchmark call in `timeout` (the JSON is rewritten after every layout: a timeout keeps the finished
# ones); a fresh machine compiles every layout (~60-100 s each, on an empty compilation cache).
# CPU check of the logic:  CPU_CHECK=1 bash gpu.sh   (tiny model, forced host devices, no .gpu/env.sh)
set -u
if [ "${CPU_CHECK:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/async_gpu_check}; HW=cpu; GPUS=${GPUS:-4}; EXTRA="--tiny"; export JAX_PLATFORMS=cpu
else
  source .gpu/env.sh
  GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l); EXTRA="--micro-batch 128 --remat minimal"
fi
R=$OUT/results/async; mkdir -p $R
cp "$0" $R/gpu.sh 2>/dev/null
[ "${CPU_CHECK:-0}" = 1 ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1 $EXTRA"
summary() {  # one line per layout: the figures to compare
python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("device", d["device"], "devices", d["devices"])
base = json.load(open(sys.argv[2]))["layouts"].get("one_device", {}) if len(sys.argv) > 2 else {}
for v in d["layouts"].values():  # speed-up over the one GPU of another file of this call
    if "step_s" in base and "step_s" in v and "speedup_over_one_device" not in v:
        v["speedup_over_one_device"] = base["step_s"] / v["step_s"]
keys = ("step_s", "rollout_s", "update_s", "reshard_s", "overlap_s", "rollout_wait_s", "speedup_over_one_device",
        "update_mfu", "preflight_predicted_step_s", "measured_over_predicted", "first_grad_norm_relative_difference",
        "staleness", "ratio_abs_deviation", "clip_fraction", "grad_norm", "error", "skipped")
for name, v in d["layouts"].items():
    print(name, {k: (round(v[k], 4) if isinstance(v[k], float) else v[k]) for k in keys if k in v})
PY
}
if [ "$GPUS" -ge 4 ]; then
  echo "== 4 GPUs: sync baselines + rollout 2 (dp=2) | update 2 (fsdp=2), lag 1 $(el)"
  timeout 330 $L --out $R/layouts_4gpu.json --layouts one_device,rollout2dp_update2fsdp_lag1,fsdp4_rollout_dp4 \
    > $R/layouts_4gpu.log 2>&1; echo "rc=$? $(el)"
  summary $R/layouts_4gpu.json | tee $R/summary_4gpu.txt
  if [ $((SECONDS-T0)) -lt 240 ]; then
    echo "== 4 GPUs extra: rollout tp=2 | update fsdp=2, and 1 | 1 $(el)"
    timeout 150 $L --out $R/layouts_4gpu_extra.json --layouts rollout2tp_update2fsdp_lag1,rollout1_update1_lag1 \
      > $R/layouts_4gpu_extra.log 2>&1; echo "rc=$? $(el)"
    summary $R/layouts_4gpu_extra.json $R/layouts_4gpu.json | tee $R/summary_4gpu_extra.txt
  fi
else
  echo "== 2 GPUs: one GPU, fsdp=2 + rollout dp=2 (sync), rollout 1 GPU | update 1 GPU (lag 1) $(el)"
  timeout 300 $L --out $R/layouts_2gpu.json --layouts one_device,rollout1_update1_lag1,fsdp2_rollout_dp2 \
    > $R/layouts_2gpu.log 2>&1; echo "rc=$? $(el)"
  summary $R/layouts_2gpu.json | tee $R/summary_2gpu.txt
fi
echo "done $(el)"
