# Session 22 call B (one H200): (1) the scan's weight slices on models no fit saw: xla_calibrate's held-out pairs
# (scanned vs unrolled prefill) and whole steps of Llama-3.2-1B and Qwen2.5-7B; (2) the GRPO recipe with the extra
# forward passes the preflight now prices as scanned (beta 0.04: the reference's; ppo_epochs 2: the old log-probs),
# each against its live preflight, beside the recipe as typed.
source .gpu/env.sh
R=$OUT/results/s22b; mkdir -p $R; cp "$0" $R/call.sh; echo 0fcf1b4 > $R/commit.txt
trap "tar czf $OUT/s22b.tgz -C $OUT/results s22b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 270 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --models llama3_2_1b,qwen2_5_7b \
  --budget-s 80 --out $R/xla > $R/xla.log 2>&1; echo "calibrate rc=$? at ${SECONDS}s"
grep -A8 "scan's share" $R/xla/accuracy.md; grep -B2 -A12 "| case" $R/xla/accuracy.md | head -14
left=$((575 - SECONDS)); echo "recipe runs get ${left}s"
timeout $left python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 110 \
  --steps 6 --cache /tmp/crucible_cache \
  --run as_typed "" --run beta "grpo.beta=0.04" --run beta_epochs2 "grpo.beta=0.04 grpo.ppo_epochs=2" \
  > $R/recipe.txt 2>&1; echo "recipe rc=$?"
grep -E "status|measured /|steps 2" $R/recipe.txt
