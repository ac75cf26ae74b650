# Session 11 call B (4 x H200, one job per GPU at once): the H200 one-GPU calibration the shipped H200 tables
# lack (issue 12): the transformers kernels with the prefill-attention grid (GPU 0), torch_fused dense (GPU 1,
# then the xla stack's calibration), torch_fused MoE (GPU 2), the training-step kernels (GPU 3).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
(CUDA_VISIBLE_DEVICES=0 timeout 330 python3 -m sims.benchmarks.accuracy --out $R/hf > $R/hf.log 2>&1; echo "hf rc=$? $(el)") &
(CUDA_VISIBLE_DEVICES=1 timeout 250 python3 -m sims.benchmarks.torch_fused --out $R/fused_tp1 > $R/fused_tp1.log 2>&1; echo "fused_tp1 rc=$? $(el)"
 CUDA_VISIBLE_DEVICES=1 timeout $((560-(SECONDS-T0))) python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --out $R/xla > $R/xla.log 2>&1; echo "xla rc=$? $(el)") &
(CUDA_VISIBLE_DEVICES=2 timeout 250 python3 -m sims.benchmarks.torch_fused --moe --out $R/moe_ep1 > $R/moe_ep1.log 2>&1; echo "moe_ep1 rc=$? $(el)") &
(CUDA_VISIBLE_DEVICES=3 timeout 400 python3 -m sims.benchmarks.train_steps --out $R/train > $R/train.log 2>&1; echo "train rc=$? $(el)") &
wait
for f in hf/accuracy.md fused_tp1/*.md moe_ep1/*.md xla/accuracy.md train/train_steps.md; do echo "--- $f"; tail -6 $R/$f 2>/dev/null; done
cp .gpu/call_s11b.sh $R/call.sh
