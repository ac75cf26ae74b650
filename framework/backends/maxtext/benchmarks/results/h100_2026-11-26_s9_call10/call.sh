# Session 9 call 10 (one H100): the final comparison: TRL, tunix and Crucible (final code) alone, one after the other.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
python3 -m pip install -q --no-deps --no-compile --target /tmp/tunix_site .gpu/tunix_wheels/*.whl || echo tunix install failed
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
echo "== trl $(date +%T)"
timeout 200 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log; echo rc=$?
echo "== tunix $(date +%T)"
PYTHONPATH=/tmp/tunix_site:$PYTHONPATH timeout 200 python3 -m framework.backends.maxtext.benchmarks.tunix_grpo_step --hardware $HW > $R/tunix.json 2> $R/tunix.log; echo rc=$?
echo "== ours $(date +%T)"
timeout 90 $B > $R/ours.json 2> $R/ours.log; echo rc=$?
timeout 90 $B --micro-batch 128 --remat minimal > $R/ours_mb128_minimal.json 2> $R/ours_mb128_minimal.log; echo rc=$?
echo "== end $(date +%T)"
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('trl', 'tunix', 'ours', 'ours_mb128_minimal'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','decode_attention','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})
    except Exception as e: print(f, 'no json', e)
PY
