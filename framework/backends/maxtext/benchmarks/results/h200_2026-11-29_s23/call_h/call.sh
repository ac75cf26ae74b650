# Session 23 call H (one H200): held-out updates for the scan's copies under remat minimal (kept_byte_passes fitted on
# call G's four; predictions written before this call: pred_before_callH.txt): Llama-3.2-1B at micro-batch 64 and
# 128, Qwen2.5-1.5B at 16, on random advantages (update_probe, beta 0 and 0.04).
source .gpu/env.sh
R=$OUT/results/s23h; mkdir -p $R; cp "$0" $R/call.sh; echo "0a67628 + the uncommitted kept-copies change" > $R/commit.txt
trap "tar czf $OUT/s23h.tgz -C $OUT/results s23h" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
for case in "llama3_2_1b 64" "llama3_2_1b 128" "qwen2_5_1_5b_instruct 16"; do
  set -- $case; N=${1}_mb${2}
  timeout 170 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 --micro-batch $2 \
    --remat minimal --steps 3 --warmup 2 > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? at ${SECONDS}s"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 1) for k, v in d['ms'].items()}, d['all_ms'])" $R/$N.json
done
