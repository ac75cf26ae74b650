# Session 23 call D (one H200): why the recipe's beta-free update reads 13% faster than update_probe's back-to-back
# updates while its beta update does not: the probe with the devices idle 0.7 s before each update (a rollout's
# share) and without, then the recipe with and without beta, the card's SM clock and power sampled every 100 ms.
source .gpu/env.sh
R=$OUT/results/s23d; mkdir -p $R; cp "$0" $R/call.sh; echo afb6ef8 > $R/commit.txt
trap "kill %1 2>/dev/null; tar czf $OUT/s23d.tgz -C $OUT/results s23d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv,noheader | tee $R/card.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $R/smi.csv &
M=qwen2_5_1_5b_instruct
for idle in 0 0.7; do
  echo "probe idle $idle starts $(date +%T.%N)" | tee -a $R/marks.txt
  timeout 120 python3 -m framework.backends.maxtext.benchmarks.update_probe --hardware $HW --model $M \
    --micro-batch 64 --remat minimal --steps 5 --warmup 2 --idle-s $idle > $R/probe_idle$idle.json 2> $R/probe_idle$idle.log
  echo "probe idle $idle rc=$? ends $(date +%T.%N)" | tee -a $R/marks.txt
done
echo "recipe starts $(date +%T.%N)" | tee -a $R/marks.txt
timeout 300 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 140 \
  --steps 6 --cache /tmp/crucible_cache \
  --run q15b "model=$M" --run q15b_beta "model=$M grpo.beta=0.04" > $R/recipe.txt 2>&1; echo "recipe rc=$?"
echo "recipe ends $(date +%T.%N)" | tee -a $R/marks.txt
grep -E "measured /|steps 2|preflight:" $R/recipe.txt
python3 - $R/probe_idle0.json $R/probe_idle0.7.json <<'PY'
import json, sys
for f in sys.argv[1:]:
    t = open(f).read(); d = json.loads(t[t.find("{"):])
    print(f.split("/")[-1], {k: round(v, 1) for k, v in d["ms"].items()}, d["all_ms"])
PY
