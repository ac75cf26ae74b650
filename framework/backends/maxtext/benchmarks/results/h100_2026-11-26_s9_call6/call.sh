# Session 9 call 6 (one H100): where the update's time goes (kernel profile at micro-batch 128, remat full) and
# other micro-batch / remat pairs (issue 15's update MFU goal).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C /tmp results' EXIT
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
echo "== profile $(date +%T)"
timeout 150 python3 .gpu/update_profile.py --hardware $HW --micro-batch 128 --remat full > $R/update_profile.json 2> $R/update_profile.log; echo rc=$?
python3 - <<PY
import json
text = open('$R/update_profile.json').read(); i = text.find('{')
print(text[:i])
for p, t in json.loads(text[i:]).items():
    print(p, round(t['total_us']), t['events']); [print('  ', r) for r in t['top'][:30]]
PY
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
for v in "128 minimal" "64 minimal" "64 full"; do
  set -- $v
  echo "== mb$1 $2 $(date +%T)"
  timeout 90 $B --micro-batch $1 --remat $2 > $R/step_mb$1_$2.json 2> $R/step_mb$1_$2.log; echo rc=$?
done
python3 - <<PY
import json, glob
for f in sorted(glob.glob('$R/step_*.json')):
    try:
        text = open(f).read(); i = text.rfind('\n{') + 1; d = json.loads(text[i:])
        print(f.split('/')[-1], {k: d.get(k) for k in ('micro_batch','remat','step_s','rollout_s','update_s','update_mfu')})
    except Exception as e: print(f, 'no json', e)
PY
for v in mb128_minimal mb64_minimal; do grep -i "error\|memory" $R/step_$v.log | tail -2 | cut -c1-200; done
echo "== end $(date +%T)"
