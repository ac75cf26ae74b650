# Session 26 call B (2 x H200): the GRPO recipe as a user types it on two GPUs (recipe=grpo_gsm8k, random-init
# weights offline), each run's own preflight (the xla table, with every change of sessions 19-25: the decode kernel,
# merged GEMMs, fsdp_exposed, the scan's slices, float32 master weights in the log-prob passes) against its measured
# step: Qwen2.5-1.5B on its default 2-GPU layout, the same with the rollout in tp=2, Llama-3.2-1B default (beta
# 0.04, a reference pass), Qwen2.5-0.5B split 1 + 1 with rollout_lag 1. No model of these runs was timed on 2 GPUs
# since session 20.
source .gpu/env.sh
R=$OUT/results/s26b; mkdir -p $R; cp "$0" $R/call.sh; echo 7b36f83 > $R/commit.txt
trap "tar czf $OUT/s26b.tgz -C $OUT/results s26b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
LAG="parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=1"
timeout 585 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 200 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q15_2gpu "model=qwen2_5_1_5b_instruct hardware.devices_per_node=2" \
  --run q15_2gpu_rtp2 "model=qwen2_5_1_5b_instruct hardware.devices_per_node=2 parallel.rollout.tp=2" \
  --run llama_beta_2gpu "model=llama3_2_1b hardware.devices_per_node=2 grpo.beta=0.04" \
  --run q05_lag1 "model=qwen2_5_0_5b_instruct hardware.devices_per_node=2 $LAG" \
  > $R/recipe.txt 2>&1; echo "recipe rc=$? at ${SECONDS}s"
grep -E "measured /|steps 2|preflight:|auto ->|rollout mesh" $R/recipe.txt; tail -8 $R/recipe.txt
