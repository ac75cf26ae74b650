# Session 23 call K (one H200): Llama-3.2-1B's update is predicted 7-9% short after the kept copies (call H): one update
# without beta profiled at micro-batch 64, remat minimal, kernels named from XLA's HLO dump.
source .gpu/env.sh
R=$OUT/results/s23k; mkdir -p $R; cp "$0" $R/call.sh; echo 86b55de > $R/commit.txt
trap "tar czf $OUT/s23k.tgz -C $OUT/results s23k" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 200 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model llama3_2_1b \
  --micro-batch 64 --remat minimal --steps 2 --warmup 2 --profile /tmp/uprof > $R/update.json 2> $R/update.log
echo "rc=$? at ${SECONDS}s"
python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 1) for k, v in d['ms'].items()}, 'GPU', round(d['kernels']['/device:GPU:0']['total_us']/1e3, 1))" $R/update.json
