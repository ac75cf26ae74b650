# Session 21 call D (4 x H200): Qwen3-8B on 4 GPUs with the dispatch fix (940262e) and the fsdp_exposed preflight
# (949cd64), every run's live preflight against its measured step: the lag-1 pipeline (split auto), the rollout in
# tp=2 x dp=2 beside the fsdp=4 update, and the rollout layout the preflight picks (tp null) beside it.
source .gpu/env.sh
R=$OUT/results/s21d; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s21d.tgz -C $OUT/results s21d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
LAG="parallel.rollout.placement=separate parallel.rollout.devices=auto"
timeout 585 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 260 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q8b_lag1 "model=qwen3_8b hardware.devices_per_node=4 $LAG grpo.rollout_lag=1" \
  --run q8b_fsdp4_tp2dp2 "model=qwen3_8b hardware.devices_per_node=4 parallel.rollout.tp=2" \
  --run q8b_fsdp4_auto "model=qwen3_8b hardware.devices_per_node=4" \
  > $R/recipe.txt 2>&1; echo rc=$?; grep -E "status|measured /|steps 2|rollout mesh|auto ->" $R/recipe.txt
