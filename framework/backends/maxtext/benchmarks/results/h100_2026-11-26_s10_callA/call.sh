# Session 10 call A (one H100): the GPU recipe's new defaults (micro_batch_size=auto, remat full) against TRL,
# alone, one after the other; XLA flag probes for the decode GEMMs' split-K and cuDNN GEMM fusions;
# then `python run.py recipe=grpo_gsm8k` as typed (random init, 2 steps) with an empty compilation cache.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
python3 -c "import jax; print('jax', jax.__version__)"
for f in --xla_gpu_cudnn_gemm_fusion_level=2 --xla_gpu_experimental_force_split_k=1; do
  XLA_FLAGS=$f python3 -c "import jax.numpy as jnp; jnp.ones(2).sum()" 2>&1 | grep -q "Unknown flag" && echo "flag $f unknown" || echo "flag $f ok"; done
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
echo "== trl $(date +%T)"
timeout 200 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log; echo rc=$?
echo "== ours, recipe pick 128/full $(date +%T)"
timeout 90 $B --micro-batch 128 --remat full > $R/ours_mb128_full.json 2> $R/ours_mb128_full.log; echo rc=$?
echo "== ours, old default 16/none $(date +%T)"
timeout 90 $B > $R/ours_mb16.json 2> $R/ours_mb16.log; echo rc=$?
echo "== flags $(date +%T)"
XLA_FLAGS=--xla_gpu_cudnn_gemm_fusion_level=2 timeout 90 $B --micro-batch 128 --remat full > $R/ours_cudnn_fusion2.json 2> $R/ours_cudnn_fusion2.log; echo rc=$?
XLA_FLAGS=--xla_gpu_experimental_force_split_k=1 timeout 90 $B --micro-batch 128 --remat full > $R/ours_split_k1.json 2> $R/ours_split_k1.log; echo rc=$?
echo "== run.py recipe=grpo_gsm8k, empty caches $(date +%T)"
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=3"
s=$(date +%s.%N)
CRUCIBLE_CACHE=/tmp/cc_recipe timeout 150 python3 run.py $RUN hydra.run.dir=$R/recipe > $R/recipe.log 2>&1
echo "recipe rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee -a $R/recipe.txt
grep -h "micro_batch_size auto\|preflight:" $R/recipe.log | cut -c1-300 | tee -a $R/recipe.txt
python3 -c "
import json; s=json.load(open('$R/recipe/summary.json')); print('startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
m=s['result']['metrics']; print({k: m.get(k) for k in ('micro_batch_size','preflight_predicted_step_s','measured_step_s')})
rows=[json.loads(l) for l in open('$R/recipe/metrics.jsonl')]
print([(r['step'], round(r['step_time_s'],3), round(r.get('compile_time_s',-1),2)) for r in rows if 'step_time_s' in r])" 2>&1 | tee -a $R/recipe.txt
rm -rf $R/recipe/checkpoints
echo "== end $(date +%T)"
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('trl', 'ours_mb128_full', 'ours_mb16', 'ours_cudnn_fusion2', 'ours_split_k1'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu','first_step_done_s')})
    except Exception as e: print(f, 'no json', e)
PY
