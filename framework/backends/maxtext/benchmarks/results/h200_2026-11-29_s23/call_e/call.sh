# Session 23 call E (one H200): a GEMM of the 1.5B update's gate/up shape (32768 x 1536 x 17920, bfloat16) in short
# bursts after 1 s idle and for 4 s sustained, random and all-zero operands, SM clock and power sampled every 50 ms;
# then the 0.5B and 8B-layer shapes the same way.
source .gpu/env.sh
R=$OUT/results/s23e; mkdir -p $R; cp "$0" $R/call.sh; echo ce153bf > $R/commit.txt
trap "kill %1 2>/dev/null; tar czf $OUT/s23e.tgz -C $OUT/results s23e" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv,noheader | tee $R/card.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 50 > $R/smi.csv &
for shape in 32768,1536,17920 65536,896,9728 4096,4096,24576; do
  echo "$shape starts $(date +%T.%N)" >> $R/marks.txt
  timeout 100 python3 -m framework.backends.maxtext.benchmarks.power_probe --shape $shape > $R/gemm_$shape.json 2> $R/gemm_$shape.log
  echo "$shape rc=$? ends $(date +%T.%N)" | tee -a $R/marks.txt
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print(d['shape_mkn'], {k: round(v, 3) for k, v in d['ms'].items()}); print({k: v[:3] + v[-3:] for k, v in d['sustained_ms'].items()})" $R/gemm_$shape.json
done
