# Session 23 call F (one H200): where the update's time goes on nonzero gradients (the preflight's training phase is
# 8-10% short for Qwen2.5-1.5B against update_probe's updates): one update without beta profiled, kernels by source.
source .gpu/env.sh
R=$OUT/results/s23f; mkdir -p $R; cp "$0" $R/call.sh; echo 38a1992 > $R/commit.txt
trap "tar czf $OUT/s23f.tgz -C $OUT/results s23f" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 250 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model qwen2_5_1_5b_instruct \
  --micro-batch 64 --remat minimal --steps 3 --warmup 2 --profile /tmp/uprof > $R/update.json 2> $R/update.log
echo "rc=$? at ${SECONDS}s"
python3 - $R/update.json <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.find("{"):])
print({k: round(v, 1) for k, v in d["ms"].items()}, "profiled", round(d["profiled_ms"], 1))
g = d["kernels"]["/device:GPU:0"]; print("GPU", round(g["total_us"]), "us")
for row in g["top"][:12]: print(row)
PY
