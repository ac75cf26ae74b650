# Session 25 call D (one H200): the GRPO recipe as a user types it (recipe=grpo_gsm8k, random-init weights offline)
# with the runs that take log-prob passes over float32 master weights: Llama-3.2-1B with beta 0.04 (a reference pass
# per micro-batch, tied head) and Qwen2.5-0.5B with ppo_epochs 2 (an old-log-prob pass, two updates); each run's own
# preflight predicts it before it starts (run_record), xla_repredict re-predicts after on the dev CPU.
source .gpu/env.sh
R=$OUT/results/s25d; mkdir -p $R; cp "$0" $R/call.sh; echo 4290e1a > $R/commit.txt
trap "tar czf $OUT/s25d.tgz -C $OUT/results s25d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
timeout 420 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 190 \
  --steps 6 --cache /tmp/crucible_cache \
  --run llama_beta "model=llama3_2_1b grpo.beta=0.04" --run q05_ppo2 "model=qwen2_5_0_5b_instruct grpo.ppo_epochs=2" \
  > $R/recipe.txt 2>&1; echo "recipe rc=$? at ${SECONDS}s"
grep -E "measured /|steps 2|preflight:" $R/recipe.txt; tail -25 $R/recipe.txt
