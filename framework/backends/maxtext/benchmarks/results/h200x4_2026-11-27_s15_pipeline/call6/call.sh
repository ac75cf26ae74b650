#!/usr/bin/env bash
# Session 15 call 6 (issue 14): the final code (after both reviews' fixes) on one 4-GPU machine: lag 2 twice and
# one GPU, the GSM8K recipe as typed (main only; calls 1-4 had the A/B against 4b14aaf).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
cp .gpu/s15f.sh $R/call.sh; cp .gpu/s15.commit $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
RR="framework/backends/maxtext/benchmarks/recipe_runs.py --hardware $HW --limit-s 120"
SEP="hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto"
python3 $RR --out $R/final --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" \
  --run lag2 "$SEP grpo.rollout_lag=2" --run lag2_again "$SEP grpo.rollout_lag=2"
