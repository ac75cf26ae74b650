# Session 25 call A (one H200): a grid of plain bf16 GEMMs (twice, to see the run-to-run spread) for the
# transformers and torch_fused tables, then a fresh held-out run of each torch stack's accuracy cases
# (transformers: 27 cases; torch_fused dense tp=1 and MoE ep=1), which no shipped table saw.
source .gpu/env.sh
R=$OUT/results/s25a; mkdir -p $R; cp "$0" $R/; echo 82af2d7 > $R/commit.txt
trap "tar czf $OUT/s25a.tgz -C $OUT/results s25a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
timeout 150 python3 -m sims.benchmarks.gemm_grid --out $R/gemm_grid.json > $R/grid.log 2>&1; echo "grid rc=$? ${SECONDS}s"
timeout 150 python3 -m sims.benchmarks.gemm_grid --out $R/gemm_grid_repeat.json > $R/grid_repeat.log 2>&1; echo "grid2 rc=$? ${SECONDS}s"
timeout 150 python3 -m sims.benchmarks.accuracy --out $R/hf > $R/hf.log 2>&1; echo "hf rc=$? ${SECONDS}s"
timeout 120 python3 -m sims.benchmarks.torch_fused --out $R/fused_tp1 > $R/fused_tp1.log 2>&1; echo "fused rc=$? ${SECONDS}s"
timeout 120 python3 -m sims.benchmarks.torch_fused --moe --out $R/moe_ep1 > $R/moe_ep1.log 2>&1; echo "moe rc=$? ${SECONDS}s"
for f in hf/accuracy.md fused_tp1/accuracy_tp1.md moe_ep1/accuracy_ep1.md; do echo "--- $f"; tail -7 $R/$f 2>/dev/null; done
tail -3 $R/*.log
