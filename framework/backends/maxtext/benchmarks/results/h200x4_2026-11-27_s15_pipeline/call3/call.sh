#!/usr/bin/env bash
# Session 15 call 3 (issue 14): the GSM8K recipe on one 4-GPU machine, main (no wait for the weight move, the next
# batch scored during the update, the next batch started after the update's dispatch) against the tree before the
# session (4b14aaf in .gpu/base), alternating; one GPU twice for main (compile-to-compile spread).
source .gpu/env.sh
ROOT=$PWD; R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
cp .gpu/s15c.sh $R/call.sh; cp .gpu/s15.commit $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
RR="framework/backends/maxtext/benchmarks/recipe_runs.py --hardware $HW --limit-s 150"
SEP="hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto"
ONE="CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1"
ln -sfn $ROOT/outputs .gpu/base/outputs 2>/dev/null; mkdir -p outputs
base() { (cd .gpu/base && PYTHONPATH=/tmp/site:$PWD python3 $ROOT/$RR "$@"); }
python3 $RR --out $R/a_main --run lag2 "$SEP grpo.rollout_lag=2" --run one_gpu "$ONE"; echo "a $(el)"
base --out $R/b_base --run base_lag2 "$SEP grpo.rollout_lag=2" --run base_one_gpu "$ONE"; echo "b $(el)"
python3 $RR --out $R/c_main --run lag2_again "$SEP grpo.rollout_lag=2" --run lag1 "$SEP grpo.rollout_lag=1"; echo "c $(el)"
base --out $R/d_base --run base_lag2_again "$SEP grpo.rollout_lag=2"; echo "d $(el)"
python3 $RR --out $R/e_main --run lag2_third "$SEP grpo.rollout_lag=2" --run one_gpu_again "$ONE"; echo "e $(el)"
echo "done $(el)"
