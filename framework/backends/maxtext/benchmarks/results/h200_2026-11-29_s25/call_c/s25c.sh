# Session 25 call C (one H200): held-out checks of the float32-master log-prob pass model (cast25) and of the
# session-24 tables, predicted before this call (pred_before_s25c.txt, pred_s25c.py): log-prob passes of
# Qwen2.5-1.5B at 32 rows, Llama-3.2-1B at 128, Qwen3-8B at 8 rows of 512 + 512, Qwen2.5-7B (never timed) at 16;
# updates on random advantages of Llama-3.2-1B at micro-batch 32 (remat full), Qwen2.5-0.5B at 32 (minimal).
source .gpu/env.sh
R=$OUT/results/s25c; mkdir -p $R; cp "$0" .gpu/pred_before_s25c.txt .gpu/pred_s25c.py $R/; echo baf3da3 > $R/commit.txt
trap "tar czf $OUT/s25c.tgz -C $OUT/results s25c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
for case in "qwen2_5_1_5b_instruct 32 256 256" "llama3_2_1b 128 256 256" "qwen3_8b 8 512 512" "qwen2_5_7b 16 256 256"; do
  set -- $case; N=logprob_${1}_mb${2}
  timeout 120 python3 -m framework.backends.maxtext.benchmarks.logprob_probe --hardware $HW --model $1 \
    --micro-batch $2 --prompt-tokens $3 --new-tokens $4 --steps 8 --warmup 2 > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? at ${SECONDS}s"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 2) for k, v in d['ms'].items()}, 'predicted', {k: round(v, 2) for k, v in d['predicted_ms'].items()})" $R/$N.json
done
for case in "llama3_2_1b 32 full" "qwen2_5_0_5b_instruct 32 minimal"; do
  set -- $case; N=update_${1}_mb${2}_$3
  timeout 120 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 --micro-batch $2 \
    --remat $3 --steps 3 --warmup 2 > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? at ${SECONDS}s"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 1) for k, v in d['ms'].items()})" $R/$N.json
done
