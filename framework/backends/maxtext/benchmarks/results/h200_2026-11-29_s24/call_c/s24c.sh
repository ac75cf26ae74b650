# Session 24 call C (one H200): held-out checks of the refitted xla table (the re-timed vocabulary head, a training
# step's attention on its own points), predicted before this call (pred_before_callC.txt): the log-prob pass of
# Qwen3-8B at 16 rows and of Qwen2.5-0.5B at 64 rows of 128 + 512 tokens; updates on random advantages of
# Llama-3.2-1B at micro-batch 16 (remat minimal), Qwen2.5-0.5B at 64 (remat none), Qwen2.5-1.5B at 32 (remat full).
source .gpu/env.sh
R=$OUT/results/s24c; mkdir -p $R; cp "$0" .gpu/pred_before_callC.txt $R/; echo 73be360 > $R/commit.txt
trap "tar czf $OUT/s24c.tgz -C $OUT/results s24c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
for case in "qwen3_8b 16 256 256" "qwen2_5_0_5b_instruct 64 128 512"; do
  set -- $case; N=logprob_${1}_mb${2}
  timeout 110 python3 -m framework.backends.maxtext.benchmarks.logprob_probe --hardware $HW --model $1 \
    --micro-batch $2 --prompt-tokens $3 --new-tokens $4 --steps 8 --warmup 2 > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? at ${SECONDS}s"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 2) for k, v in d['ms'].items()}, 'predicted', {k: round(v, 2) for k, v in d['predicted_ms'].items()})" $R/$N.json
done
for case in "llama3_2_1b 16 minimal" "qwen2_5_0_5b_instruct 64 none" "qwen2_5_1_5b_instruct 32 full"; do
  set -- $case; N=update_${1}_mb${2}_$3
  timeout 110 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 --micro-batch $2 \
    --remat $3 --steps 3 --warmup 2 > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? at ${SECONDS}s"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 1) for k, v in d['ms'].items()})" $R/$N.json
done
