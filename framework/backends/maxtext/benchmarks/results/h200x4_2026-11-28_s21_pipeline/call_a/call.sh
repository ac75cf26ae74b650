# Session 21 call A (4 x H200): Qwen3-8B shapes on 4 GPUs, the GSM8K recipe as typed otherwise (random init, 16 x 8,
# 256 + 256 tokens, 6 steps): the lag-1 pipeline with the split the preflight picks (issue 14's last 4-GPU shape), and the
# rollout in its own tp=2 x dp=2 layout on the update's 4 devices (fsdp=4), the same machine; one cache so the 8B random
# init is built once.
source .gpu/env.sh
R=$OUT/results/s21a; mkdir -p $R; cp "$0" $R/call.sh; git rev-parse HEAD > $R/commit.txt 2>/dev/null
trap "tar czf $OUT/s21a.tgz -C $OUT/results s21a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 585 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 330 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q8b_lag1 "model=qwen3_8b hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=1" \
  --run q8b_fsdp4_tp2dp2 "model=qwen3_8b hardware.devices_per_node=4 parallel.rollout.tp=2" \
  > $R/recipe.txt 2>&1; echo rc=$?; tail -40 $R/recipe.txt
