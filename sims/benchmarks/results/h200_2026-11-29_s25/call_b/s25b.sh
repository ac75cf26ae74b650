# Session 25 call B (one H200): the GEMM grid in a random order (two seeds): were call A's large GEMMs, timed
# smallest first and so one after another at the end, slower than the model's same shapes for the card's clock?
source .gpu/env.sh
R=$OUT/results/s25b; mkdir -p $R; cp "$0" $R/; echo eaab4b3 > $R/commit.txt
trap "tar czf $OUT/s25b.tgz -C $OUT/results s25b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
for seed in 1 2; do
  timeout 150 python3 -m sims.benchmarks.gemm_grid --shuffle $seed --out $R/gemm_grid_shuffled$seed.json > $R/grid$seed.log 2>&1
  echo "grid seed $seed rc=$? ${SECONDS}s"
done
timeout 100 python3 -m sims.benchmarks.gemm_grid --out $R/gemm_grid_sorted.json > $R/grid_sorted.log 2>&1; echo "sorted rc=$? ${SECONDS}s"
