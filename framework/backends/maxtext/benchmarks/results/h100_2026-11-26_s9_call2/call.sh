# Session 9 call 2 (one H100): TRL alone, ours (Pallas decode) alone, tunix alone; then the first step with the
# model directory already built (as a hub cache) and an empty compilation cache.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__)"
python3 -m pip install -q --no-deps --no-compile --target /tmp/tunix_site .gpu/tunix_wheels/*.whl || echo tunix install failed
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
echo "== trl $(date +%T)"
timeout 200 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log; echo rc=$?
echo "== ours $(date +%T)"
timeout 90 $B > $R/ours.json 2> $R/ours.log; echo rc=$?
timeout 90 $B --micro-batch 128 --remat full > $R/ours_mb128_full.json 2> $R/ours_mb128_full.log; echo rc=$?
echo "== tunix $(date +%T)"
PYTHONPATH=/tmp/tunix_site:$PYTHONPATH timeout 220 python3 -m framework.backends.maxtext.benchmarks.tunix_grpo_step --hardware $HW > $R/tunix.json 2> $R/tunix.log; echo rc=$?
echo "== first step, model dir prebuilt $(date +%T)"
s=$(date +%s.%N)
python3 -c "
from pathlib import Path
from framework.models.tiny import resolve_model_dir
from framework.core.paths import load_conf
print(resolve_model_dir(load_conf('model','qwen2_5_0_5b_instruct') | {'random_init': True}, Path('/tmp/cc_first/models')))" > $R/build.txt 2>&1
echo "model build $(python3 -c "import time;print(round(time.time()-$s,1))") s" | tee -a $R/first.txt
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2 grpo.micro_batch_size=auto backend.adapter.remat=full"
s=$(date +%s.%N)
CRUCIBLE_CACHE=/tmp/cc_first timeout 100 python3 run.py $RUN hydra.run.dir=$R/first_cold > $R/first_cold.log 2>&1
echo "cold compile cache rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee -a $R/first.txt
python3 -c "
import json; s=json.load(open('$R/first_cold/summary.json')); print('startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
rows=[json.loads(l) for l in open('$R/first_cold/metrics.jsonl')]
print([(r['step'], round(r['step_time_s'],2), round(r.get('compile_time_s',-1),2)) for r in rows])" | tee -a $R/first.txt
rm -rf $R/first_*/checkpoints
echo "== end $(date +%T)"
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('trl', 'ours', 'ours_mb128_full', 'tunix'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu','first_step_done_s')})
    except Exception as e: print(f, 'no json', e)
PY
grep -v "^W\|^I" $R/tunix.log | tail -8 | cut -c1-400
