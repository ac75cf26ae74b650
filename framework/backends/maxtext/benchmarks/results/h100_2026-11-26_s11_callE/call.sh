# Session 11 call E (one H100), main after the session's merges: (1) `python3 run.py recipe=grpo_gsm8k` on a fresh
# machine with empty caches (model build + compile), the first-step goal of issue 15; (2) TRL GRPOTrainer alone,
# then ours at the recipe's settings (micro-batch 128, remat minimal, the two-stage sampler) alone: the same-call ratio.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
git log -1 --format=%H > $R/commit.txt 2>/dev/null
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"
s=$(date +%s.%N)
CRUCIBLE_CACHE=/tmp/cc_cold timeout 150 python3 run.py $RUN hydra.run.dir=$R/first_cold > $R/first_cold.log 2>&1
echo "cold (model build + compile) rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee $R/first.txt
python3 -c "
import json; s=json.load(open('$R/first_cold/summary.json')); print('startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
m=s['result']['metrics']; print({k: m.get(k) for k in ('micro_batch_size','remat','preflight_predicted_step_s','measured_step_s')})
rows=[json.loads(l) for l in open('$R/first_cold/metrics.jsonl')]
print([(r['step'], round(r['step_time_s'],2), round(r.get('compile_time_s',-1),2)) for r in rows if 'step_time_s' in r])" 2>&1 | tee -a $R/first.txt
grep -n "auto ->\|preflight:" $R/first_cold.log | cut -c1-220
rm -rf $R/first_cold/checkpoints
echo "== trl $(date +%T)"
timeout 200 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log; echo rc=$?
echo "== ours $(date +%T)"
timeout 120 python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW --micro-batch 128 --remat minimal > $R/ours.json 2> $R/ours.log; echo rc=$?
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('trl', 'ours'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})
    except Exception as e: print(f, 'no json', e)
PY
cp .gpu/call_s11e.sh $R/call.sh
