# Session 21 call B (4 x H200): the next batch now starts sampling after the update's first program is dispatched
# (call A: 8B lag 1 alternated 3.25 / 4.98 s steps, the rollout started 3.1 s into a 3.2 s update). Qwen3-8B lag 1 on 4
# GPUs again, Qwen2.5-1.5B lag 1 on 2 of them (session 20: every other step waited 0.18 s), and the 0.5B recipe at lag 2
# on 4 against one GPU (session 18: 0.2164 s, 3.47x), the same machine.
source .gpu/env.sh
R=$OUT/results/s21b; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s21b.tgz -C $OUT/results s21b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
LAG="parallel.rollout.placement=separate parallel.rollout.devices=auto"
timeout 585 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 260 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q8b_lag1 "model=qwen3_8b hardware.devices_per_node=4 $LAG grpo.rollout_lag=1" \
  --run q15b_lag1 "CUDA_VISIBLE_DEVICES=0,1 model=qwen2_5_1_5b_instruct hardware.devices_per_node=2 $LAG grpo.rollout_lag=1" \
  --run q05_one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1 grpo.steps=8" \
  --run q05_lag2 "hardware.devices_per_node=4 $LAG grpo.rollout_lag=2 grpo.steps=8" \
  > $R/recipe.txt 2>&1; echo rc=$?; grep -v "auto candidate" $R/recipe.txt | tail -45
