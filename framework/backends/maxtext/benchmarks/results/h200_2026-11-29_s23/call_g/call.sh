# Session 23 call G (one H200): the scan's device-to-device copies (memcpy32_post) in the update under remat minimal and
# none: update_probe --profile at other micro-batches and models, and the 1.5B's accumulate HLO (what the copies move).
source .gpu/env.sh
R=$OUT/results/s23g; mkdir -p $R; cp "$0" $R/call.sh; echo 0a67628 > $R/commit.txt
trap "tar czf $OUT/s23g.tgz -C $OUT/results s23g" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
for case in "qwen2_5_1_5b_instruct 64 minimal" "qwen2_5_1_5b_instruct 32 minimal" "qwen2_5_0_5b_instruct 128 minimal" \
            "qwen2_5_1_5b_instruct 64 none" "qwen2_5_0_5b_instruct 32 minimal"; do
  set -- $case; N=${1}_mb${2}_${3}
  timeout 150 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 --micro-batch $2 \
    --remat $3 --steps 3 --warmup 2 --profile /tmp/prof_$N > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? at ${SECONDS}s"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); g=d['kernels']['/device:GPU:0']; print({k: round(v, 1) for k, v in d['ms'].items()}, 'GPU', round(g['total_us']/1e3, 1), [(r[0], r[1], round(r[2]/1e3, 2)) for r in g['top'] if 'memcpy' in r[0] or 'dynamic_update' in r[0]][:6])" $R/$N.json
done
mkdir -p $R/hlo; cp /tmp/prof_qwen2_5_1_5b_instruct_mb64_minimal/hlo/*_accumulate*gpu_after_optimizations.txt $R/hlo/ 2>/dev/null
ls -la $R/hlo
