#!/usr/bin/env bash
# Session 15 call 4 (issue 14): grpo.rollout_lag=1 on one 4-GPU machine, main against the tree before the session
# (4b14aaf in .gpu/base), alternating: calls 2 and 3 measured main's lag-1 rollout 0.374-0.391 s, session 14 0.358-0.366 s.
source .gpu/env.sh
ROOT=$PWD; R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
cp .gpu/s15d.sh $R/call.sh; cp .gpu/s15.commit $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
RR="framework/backends/maxtext/benchmarks/recipe_runs.py --hardware $HW --limit-s 150"
SEP="hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto"
ONE="CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1"
ln -sfn $ROOT/outputs .gpu/base/outputs 2>/dev/null; mkdir -p outputs
base() { (cd .gpu/base && PYTHONPATH=/tmp/site:$PWD python3 $ROOT/$RR "$@"); }
python3 $RR --out $R/a_main --run lag1 "$SEP grpo.rollout_lag=1"; echo "a $(el)"
base --out $R/b_base --run base_lag1 "$SEP grpo.rollout_lag=1"; echo "b $(el)"
python3 $RR --out $R/c_main --run lag1_again "$SEP grpo.rollout_lag=1"; echo "c $(el)"
base --out $R/d_base --run base_lag1_again "$SEP grpo.rollout_lag=1"; echo "d $(el)"
echo "done $(el)"
