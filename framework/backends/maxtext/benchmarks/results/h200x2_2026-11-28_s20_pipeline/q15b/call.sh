# Session 20 call F (2 x H200, the machine of call E): call E's pair at Qwen2.5-1.5B shapes (6 steps): measured step
# against the run's own preflight with this session's h200_xla.json.
source .gpu/env.sh
R=$OUT/results/s20f; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s20f.tgz -C $OUT/results s20f" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 380 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 170 \
  --run one_gpu_1_5b "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1 model=qwen2_5_1_5b_instruct grpo.steps=6" \
  --run lag1_1_5b "hardware.devices_per_node=2 parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=1 model=qwen2_5_1_5b_instruct grpo.steps=6" \
  > $R/recipe.txt 2>&1; echo rc=$?; grep -v "steps (" $R/recipe.txt | tail -22
