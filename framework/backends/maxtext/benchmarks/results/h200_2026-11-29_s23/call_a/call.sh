# Session 23 call A (one H200): the GRPO log-prob pass alone (logprob_probe: full pass with float32 and bfloat16
# weights, prompts padded, the layers alone), with a kernel profile, for the recipe's two models at their
# micro-batches (0.5B: 128 rows, 1.5B: 64 rows; 256 + 256 tokens, chunk 128).
source .gpu/env.sh
R=$OUT/results/s23a; mkdir -p $R; cp "$0" $R/call.sh; echo c56455a > $R/commit.txt
trap "tar czf $OUT/s23a.tgz -C $OUT/results s23a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
for case in "qwen2_5_0_5b_instruct 128" "qwen2_5_1_5b_instruct 64"; do
  set -- $case
  timeout 250 python3 -m framework.backends.maxtext.benchmarks.logprob_probe --hardware $HW --model $1 \
    --micro-batch $2 --steps 8 --warmup 2 --profile /tmp/prof_$1 > $R/$1.json 2> $R/$1.log
  echo "$1 rc=$? at ${SECONDS}s"
  python3 - $R/$1.json <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.find("{"):])
print(d["model"], {k: round(v, 2) for k, v in d["ms"].items()}, "predicted", {k: round(v, 2) for k, v in d["predicted_ms"].items()})
for name, v in d.get("kernels", {}).items():
    print(name, round(v["total_us"]), "us", v["events"], "events")
PY
done
