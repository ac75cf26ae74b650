# Session 18 call D (4 GPUs, asked for H100s): issue 14's lag-2 pipeline against one GPU of the same machine, the recipe as typed.
source .gpu/env.sh
R=$OUT/results/s18d; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s18d.tgz -C $OUT/results s18d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 280 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 130 \
  --run lag2 "hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=2" \
  --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" > $R/recipe.txt 2>&1; echo rc=$?; tail -30 $R/recipe.txt
