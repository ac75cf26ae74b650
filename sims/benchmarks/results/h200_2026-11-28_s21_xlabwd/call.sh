# Session 21 call C (the same 4 x H200, warm): the training kernels with both forms of the merged GEMMs (xla_backward,
# for the refit of h200_xla.json) on GPU 0, and Qwen2.5-1.5B on one GPU (call B's lag-1 pair's baseline).
source .gpu/env.sh
R=$OUT/results/s21c; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s21c.tgz -C $OUT/results s21c" EXIT
CUDA_VISIBLE_DEVICES=0 timeout 240 python3 -m framework.backends.maxtext.benchmarks.xla_backward --hardware $HW --out $R/xlabwd > $R/xlabwd.log 2>&1; echo "bwd rc=$?"
tail -6 $R/xlabwd.log
timeout 200 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 150 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q15b_one_gpu "CUDA_VISIBLE_DEVICES=0 model=qwen2_5_1_5b_instruct hardware.devices_per_node=1" \
  > $R/recipe.txt 2>&1; echo rc=$?; grep -E "status|measured /|steps 2" $R/recipe.txt
