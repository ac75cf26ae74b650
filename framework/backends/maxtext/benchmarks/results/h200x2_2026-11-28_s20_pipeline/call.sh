# Session 20 call E (2 x H200): the GSM8K recipe on one GPU and as the lag-1 pipeline on two, with the h200_xla.json
# refitted this session: measured step against the run's own preflight (fresh held-out runs for the refit).
source .gpu/env.sh
R=$OUT/results/s20e; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s20e.tgz -C $OUT/results s20e" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 330 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 120 \
  --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" \
  --run lag1 "hardware.devices_per_node=2 parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=1" \
  > $R/recipe.txt 2>&1; echo rc=$?; tail -25 $R/recipe.txt
