# Session 14 probe (one H100): do XLA's exhaustive Triton tiling search and Triton for any GEMM fusion move the
# decode step (decode_probe, 128 and 16 rows) and the GRPO step (grpo_step at the recipe's settings)?
source .gpu/env.sh
R=$OUT/results/probe14; mkdir -p $R; trap "tar czf $OUT/probe14.tgz -C $OUT/results probe14" EXIT
cp "$0" $R/gpu.sh; git rev-parse HEAD > $R/commit.txt 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
i=0
for flags in "" "--xla_gpu_exhaustive_tiling_search=true" "--xla_gpu_triton_gemm_any=true" "--xla_gpu_exhaustive_tiling_search=true --xla_gpu_triton_gemm_any=true"; do
  i=$((i+1)); s=$SECONDS
  XLA_FLAGS="$flags" timeout 110 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW > $R/decode_$i.json 2> $R/decode_$i.log
  echo "decode $i [$flags] rc=$? $((SECONDS-s)) s (t=$((SECONDS-T0)))"
  python3 -c "import json,sys; d=json.load(open('$R/decode_$i.json')); print({r: (round(v['ms_per_decode_step'],3), round(v['tokens_per_s']), round(v['first_call_s'],1)) for r, v in d['rows'].items()})" 2>&1 | tail -1
done
for flags in "" "--xla_gpu_triton_gemm_any=true"; do
  i=$((i+1)); s=$SECONDS
  [ $((SECONDS-T0)) -gt 420 ] && { echo "skip grpo_step [$flags]: time"; continue; }
  XLA_FLAGS="$flags" timeout 120 python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW --micro-batch 128 --remat minimal > $R/step_$i.json 2> $R/step_$i.log
  echo "grpo_step $i [$flags] rc=$? $((SECONDS-s)) s"
  python3 -c "
import json; t=open('$R/step_$i.json').read(); d=json.loads(t[t.rfind('\n{')+1:])
print({k: d.get(k) for k in ('step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})" 2>&1 | tail -1
done
