#!/usr/bin/env bash
# Session 15 call 5 (issue 14): the GSM8K recipe at Qwen2.5-1.5B shapes on one 4-GPU machine: one GPU, then
# grpo.rollout_lag=2 and 1 with parallel.rollout.devices=auto (the preflight picks the split), main only.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
cp .gpu/s15e.sh $R/call.sh; cp .gpu/s15.commit $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
RR="framework/backends/maxtext/benchmarks/recipe_runs.py --hardware $HW --steps 6 --limit-s 170"
SEP="model=qwen2_5_1_5b_instruct hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto"
python3 $RR --out $R/q15b --run one_gpu_1_5b "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1 model=qwen2_5_1_5b_instruct" \
  --run lag2_1_5b "$SEP grpo.rollout_lag=2" --run lag1_1_5b "$SEP grpo.rollout_lag=1"; echo "done $(el)"
