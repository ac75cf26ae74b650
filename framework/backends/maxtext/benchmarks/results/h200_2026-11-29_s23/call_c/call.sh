# Session 23 call C (one H200): calls A and B again under the XLA flag the maxtext backend's gpu_xla_flags patch sets
# for every GPU run (--xla_gpu_enable_latency_hiding_scheduler=true): the recipe's beta-free update read 13% faster
# than update_probe's and its beta update only 2-4% faster.
source .gpu/env.sh
R=$OUT/results/s23c; mkdir -p $R; cp "$0" $R/call.sh; echo f91735b > $R/commit.txt
trap "tar czf $OUT/s23c.tgz -C $OUT/results s23c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
export XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true
for case in "qwen2_5_0_5b_instruct 128" "qwen2_5_1_5b_instruct 64"; do
  set -- $case
  timeout 200 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 \
    --micro-batch $2 --remat minimal --steps 5 --warmup 2 > $R/update_$1.json 2> $R/update_$1.log
  echo "update $1 rc=$? at ${SECONDS}s"
  timeout 150 python3 -m framework.backends.maxtext.benchmarks.logprob_probe --hardware $HW --model $1 \
    --micro-batch $2 --steps 8 --warmup 2 > $R/pass_$1.json 2> $R/pass_$1.log
  echo "pass $1 rc=$? at ${SECONDS}s"
  python3 - $R/update_$1.json $R/pass_$1.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    t = open(f).read(); d = json.loads(t[t.find("{"):])
    print(f.split("/")[-1], {k: round(v, 1) for k, v in d["ms"].items()}, {k: round(v, 1) for k, v in d.get("dispatch_ms", {}).items()})
PY
done
