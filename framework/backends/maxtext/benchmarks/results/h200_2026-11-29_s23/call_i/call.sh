# Session 23 call I (one H200): the same compiled update on random and on all-zero advantages, alternately in one
# process (update_probe --zero-advantages), with the SM clock and power sampled every 100 ms.
source .gpu/env.sh
R=$OUT/results/s23i; mkdir -p $R; cp "$0" $R/call.sh; echo 67d953b > $R/commit.txt
trap "kill %1 2>/dev/null; tar czf $OUT/s23i.tgz -C $OUT/results s23i" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 100 > $R/smi.csv &
for case in "qwen2_5_0_5b_instruct 128" "qwen2_5_1_5b_instruct 64"; do
  set -- $case; N=${1}_mb${2}
  echo "$N starts $(date +%T.%N)" >> $R/marks.txt
  timeout 170 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $1 --micro-batch $2 \
    --remat minimal --steps 5 --warmup 2 --zero-advantages > $R/$N.json 2> $R/$N.log
  echo "$N rc=$? ends $(date +%T.%N)" | tee -a $R/marks.txt
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); d=json.loads(t[t.find('{'):]); print({k: round(v, 1) for k, v in d['ms'].items()}, d['all_ms'])" $R/$N.json
done
