# Session 22 call D (one H200): held-out check of the log-prob pass model (8ffa9c2: the preflight's reference pass
# scanned, over the completion's positions with their log-softmax) on Qwen2.5-1.5B, with and without grpo.beta.
source .gpu/env.sh
R=$OUT/results/s22d; mkdir -p $R; cp "$0" $R/call.sh; echo 8ffa9c2 > $R/commit.txt
trap "tar czf $OUT/s22d.tgz -C $OUT/results s22d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 560 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 250 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q15b "model=qwen2_5_1_5b_instruct" --run q15b_beta "model=qwen2_5_1_5b_instruct grpo.beta=0.04" \
  > $R/recipe.txt 2>&1; echo "recipe rc=$?"
grep -E "status|measured /|steps 2|preflight:" $R/recipe.txt
