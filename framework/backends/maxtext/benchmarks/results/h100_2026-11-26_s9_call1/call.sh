# Session 9 call 1 (one H100): the Pallas decode kernel: greedy vs XLA, block/split variants, GRPO step with it.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
python3 -c "import jax; print(jax.__version__, jax.devices())"
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
echo "== kernel_check $(date +%T)"
timeout 230 python3 .gpu/kernel_check.py --hardware $HW > $R/kernel_check.json 2> $R/kernel_check.log; echo rc=$?
tail -1 $R/kernel_check.json; grep -v "^W\|^I" $R/kernel_check.log | tail -5 | cut -c1-400
echo "== grpo_step pallas $(date +%T)"
timeout 100 $B > $R/step_pallas.json 2> $R/step_pallas.log; echo rc=$?
echo "== grpo_step pallas mb128 full $(date +%T)"
timeout 100 $B --micro-batch 128 --remat full > $R/step_pallas_mb128_full.json 2> $R/step_pallas_mb128_full.log; echo rc=$?
echo "== grpo_step xla $(date +%T)"
timeout 100 $B --decode-attention xla > $R/step_xla.json 2> $R/step_xla.log; echo rc=$?
echo "== end $(date +%T)"
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('step_pallas', 'step_pallas_mb128_full', 'step_xla'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu','first_step_done_s')})
    except Exception as e: print(f, 'no json', e)
PY
for f in step_pallas step_xla; do grep -v "^W\|^I" $R/$f.log | tail -3 | cut -c1-300; done
