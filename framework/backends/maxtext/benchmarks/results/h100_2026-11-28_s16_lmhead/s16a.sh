# Session 16 call A (one H100): the update's vocabulary projection with a hand-written backward (.gpu/new, wt-lmhead)
# against main (.gpu/base, 5009f9c), grpo_step alternating; then a kernel profile of each update and of the decode.
source .gpu/env.sh
R=$OUT/results/s16a; mkdir -p $R; trap "tar czf $OUT/s16a.tgz -C $OUT/results s16a" EXIT
cp "$0" .gpu/s16_update_profile.py $R/; cat .gpu/*.commit > $R/commits.txt 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
step() {  # tree label
  ( cd .gpu/$1 && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW --micro-batch 128 --remat minimal > $R/step_$2.json 2> $R/step_$2.log )
  echo "grpo_step $2 rc=$? (t=$((SECONDS-T0)))"
  python3 -c "
import json; t=open('$R/step_$2.json').read(); d=json.loads(t[t.find('{'):])
print({k: d.get(k) for k in ('step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})" 2>&1 | tail -1
}
step base base1; step new new1; step base base2; step new new2
for t in new base; do
  [ $((SECONDS-T0)) -gt 470 ] && { echo "skip profile $t: time"; continue; }
  ( cd .gpu/$t && PYTHONPATH=/tmp/site:$PWD timeout 150 python3 $R/s16_update_profile.py --hardware $HW --micro-batch 128 --remat minimal $R/update_profile_$t.json > $R/update_profile_$t.txt 2>&1 )
  echo "profile $t rc=$? (t=$((SECONDS-T0)))"; grep -A 28 "GPU\|gpu" $R/update_profile_$t.txt | head -32
done
