# Session 24 call A (one H200): the vocabulary head as the update runs it now (xla_vocab: the GEMM and
# target_log_probs, alone and with their vjp, four models), then the GRPO log-prob pass alone (logprob_probe) of
# Qwen2.5-0.5B at 128 rows, Qwen2.5-1.5B at 64 (session 23's cases) and Llama-3.2-1B at 64 (held out).
source .gpu/env.sh
R=$OUT/results/s24a; mkdir -p $R; cp "$0" $R/call.sh; echo 04f6a5b > $R/commit.txt
trap "tar czf $OUT/s24a.tgz -C $OUT/results s24a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
timeout 300 python3 -m framework.backends.maxtext.benchmarks.xla_vocab --hardware $HW --out $R/vocab > $R/vocab.log 2>&1
echo "vocab rc=$? at ${SECONDS}s"; grep -v "^\[.*s\] *$" $R/vocab.log | tail -14
for case in "qwen2_5_0_5b_instruct 128" "qwen2_5_1_5b_instruct 64" "llama3_2_1b 64"; do
  set -- $case
  timeout 150 python3 -m framework.backends.maxtext.benchmarks.logprob_probe --hardware $HW --model $1 \
    --micro-batch $2 --steps 8 --warmup 2 > $R/$1.json 2> $R/$1.log
  echo "$1 rc=$? at ${SECONDS}s"
  python3 - $R/$1.json <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.find("{"):])
print(d["model"], {k: round(v, 2) for k, v in d["ms"].items()}, "predicted", {k: round(v, 2) for k, v in d["predicted_ms"].items()})
PY
done
