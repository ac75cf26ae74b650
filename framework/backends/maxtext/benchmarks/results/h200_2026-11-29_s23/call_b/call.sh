# Session 23 call B (one H200): the GRPO update with and without grpo.beta (update_probe, remat minimal as the
# recipe's preflight picks), the recipe's models at their micro-batches; one beta update of each traced.
source .gpu/env.sh
R=$OUT/results/s23b; mkdir -p $R; cp "$0" $R/call.sh; echo f91735b > $R/commit.txt
trap "tar czf $OUT/s23b.tgz -C $OUT/results s23b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
for case in "qwen2_5_0_5b_instruct 128" "qwen2_5_1_5b_instruct 64"; do
  set -- $case
  timeout 250 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 \
    --micro-batch $2 --remat minimal --steps 5 --warmup 2 --profile /tmp/uprof_$1 > $R/$1.json 2> $R/$1.log
  echo "$1 rc=$? at ${SECONDS}s"
  python3 - $R/$1.json <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.find("{"):])
print(d["model"], "ms", {k: round(v, 1) for k, v in d["ms"].items()}, "dispatch", {k: round(v, 1) for k, v in d["dispatch_ms"].items()}, "profiled", round(d.get("profiled_ms", 0), 1))
for name, v in d.get("kernels", {}).items():
    print(name, round(v["total_us"]), "us", v["events"], "events")
PY
done
