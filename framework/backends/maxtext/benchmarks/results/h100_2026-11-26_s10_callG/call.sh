# Session 10 call G (one H100): main after the session's merges: a kernel profile of the update at micro-batch 16
# (why it is slower than 128 with remat full), then `python run.py recipe=grpo_gsm8k` as typed (3 steps,
# empty caches): the preflight's prediction against the measured step with the merged training model.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
git log -1 --format=%H 2>/dev/null > $R/commit.txt
echo "== update profile mb16 $(date +%T)"
timeout 200 python3 .gpu/update_profile.py --micro-batch 16 --remat none > $R/update_profile_mb16.txt 2>$R/update_profile_mb16.log; echo rc=$?
grep "step" $R/update_profile_mb16.txt | head -5
echo "== run.py recipe=grpo_gsm8k $(date +%T)"
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=3"
s=$(date +%s.%N)
CRUCIBLE_CACHE=/tmp/cc_recipe timeout 200 python3 run.py $RUN hydra.run.dir=$R/recipe > $R/recipe.log 2>&1
echo "recipe rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee -a $R/recipe.txt
grep -h "micro_batch_size auto\|preflight:" $R/recipe.log | cut -c1-300 | tee -a $R/recipe.txt
python3 -c "
import json; s=json.load(open('$R/recipe/summary.json')); print('startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
m=s['result']['metrics']; print({k: (round(v,4) if isinstance(v,float) else v) for k,v in m.items() if 'preflight' in k or k in ('micro_batch_size','measured_step_s','rollout_time_s','update_time_s')})" 2>&1 | tee -a $R/recipe.txt
rm -rf $R/recipe/checkpoints
