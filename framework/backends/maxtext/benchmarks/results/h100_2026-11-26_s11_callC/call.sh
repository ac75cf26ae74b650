# Session 11 call C (one H100): the GRPO step before (a2113ee) and after the two-stage sampler, alternating,
# each alone (issue 15).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
mkdir -p /tmp/old && tar xf .gpu/old.tar -C /tmp/old
B="-m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW --micro-batch 128 --remat full"
for i in 1 2; do
  echo "== old $i $(date +%T)"; (cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 110 python3 $B > $R/old_$i.json 2> $R/old_$i.log); echo rc=$?
  echo "== new $i $(date +%T)"; timeout 110 python3 $B > $R/new_$i.json 2> $R/new_$i.log; echo rc=$?
done
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('old_1', 'new_1', 'old_2', 'new_2'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})
    except Exception as e: print(f, 'no json', e)
PY
cp .gpu/call_s11c.sh $R/call.sh
