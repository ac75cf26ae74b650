#!/usr/bin/env bash
# Session 15 call: issue 14 (the weight move off the update's path, the next batch scored during the update)
# as a user types the GSM8K recipe on one 4-GPU machine, A/B against the tree before (4b14aaf, .gpu/base) in the
# same call; then, on H100s only, issue 12's missing 4 x H100 NCCL collectives and tp=4 / ep=4 accuracy.
source .gpu/env.sh
ROOT=$PWD; R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
cp .gpu/s15.sh $R/call.sh; cp .gpu/s15.commit $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
RR="framework/backends/maxtext/benchmarks/recipe_runs.py --hardware $HW --limit-s 170"
SEP="hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto"
ln -sfn $ROOT/outputs .gpu/base/outputs 2>/dev/null; mkdir -p outputs
python3 $RR --out $R/grpo --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" \
  --run lag2_auto "$SEP grpo.rollout_lag=2" --run lag1_auto "$SEP grpo.rollout_lag=1"; echo "new $(el)"
(cd .gpu/base && PYTHONPATH=/tmp/site:$PWD python3 $ROOT/$RR --out $R/grpo_base --run base_lag2_auto "$SEP grpo.rollout_lag=2" \
  --run base_one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1"); echo "base $(el)"
python3 $RR --out $R/grpo_again --run lag2_auto_again "$SEP grpo.rollout_lag=2"; echo "again $(el)"
if [ "$HW" = h100 ] && [ $((SECONDS-T0)) -lt 420 ]; then
  TR="python3 -m torch.distributed.run"
  timeout 80 $TR --nproc_per_node 4 -m sims.calibration.collectives measure --out $R/coll > $R/coll_4.log 2>&1; echo "coll rc=$? $(el)"
  python3 -m sims.calibration.collectives fit --hardware conf/hardware/$HW.yaml --table sims/calibration/tables/${HW}_torch_fused.json \
    --out $R/tp4_table.json $R/coll/collectives_4.json > $R/fit.log 2>&1; echo "fit rc=$? $(el)"
  timeout $((540-(SECONDS-T0))) $TR --nproc_per_node 4 -m sims.benchmarks.torch_fused --table $R/tp4_table.json --out $R/fused_tp4 > $R/fused_tp4.log 2>&1; echo "tp4 rc=$? $(el)"
  tail -12 $R/fused_tp4/*.md 2>/dev/null
  timeout $((585-(SECONDS-T0))) $TR --nproc_per_node 4 -m sims.benchmarks.torch_fused --moe --table $R/tp4_table.json --out $R/moe_ep4 > $R/moe_ep4.log 2>&1; echo "ep4 rc=$? $(el)"
  tail -12 $R/moe_ep4/*.md 2>/dev/null
fi
echo "done $(el)"
