# Session 11 call D (one H100): (1) where the random-init model build's time goes on a fresh machine (issue 15);
# (2) helper branch wt-remat: `python3 run.py recipe=grpo_gsm8k backend.adapter.remat=auto ...` with the model
# directory built by (1) and an empty compilation cache (first step, what auto picks); (3) helper branch
# wt-megnorm: the megatron 1B step with the Float16Module wrap (after) and without (before).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
export CRUCIBLE_CACHE=/tmp/cc_first
echo "== build profile $(el)"
timeout 150 python3 .gpu/build_profile.py /tmp/cc_first/models > $R/build_profile.txt 2>&1; echo "build rc=$? $(el)"; grep "^import torch" $R/build_profile.txt
mkdir -p /tmp/remat /tmp/meg && tar xf .gpu/remat.tar -C /tmp/remat && tar xf .gpu/meg.tar -C /tmp/meg
echo "== remat auto $(el)"
s=$SECONDS
(cd /tmp/remat && PYTHONPATH=/tmp/site:/tmp/remat timeout 170 bash -c "$(grep -v '^#' GPU_COMMAND.txt)") > $R/remat_stdout.txt 2>&1; echo "remat rc=$? wall=$((SECONDS-s)) s $(el)"
cat $R/remat_stdout.txt | tail -8
python3 -c "
import json; s=json.load(open('$OUT/remat_auto/summary.json')); print('startup', {k: round(v,1) for k,v in s.get('startup_s',{}).items() if v is not None})
rows=[json.loads(l) for l in open('$OUT/remat_auto/metrics.jsonl')]
print([(r['step'], round(r['step_time_s'],3), round(r.get('compile_time_s',-1),2)) for r in rows if 'step_time_s' in r])" 2>&1 | tee $R/remat_first.txt
rm -rf $OUT/remat_auto/checkpoints; mv $OUT/remat_auto $R/ 2>/dev/null; mv $OUT/remat_auto.log $R/ 2>/dev/null
echo "== megatron $(el)"
(cd /tmp/meg && PYTHONPATH=/tmp/site:/tmp/meg timeout $((585-(SECONDS-T0))) bash -c "$(grep -v '^#' GPU_COMMAND.txt)") > $R/meg_stdout.txt 2>&1; echo "meg rc=$? $(el)"
mv $OUT/megatron_1b_*.json $OUT/after.log $OUT/before.log $R/ 2>/dev/null
tail -5 $R/meg_stdout.txt
python3 - <<PY
import json
for f in ('after', 'before'):
    try: d = json.load(open('$R/megatron_1b_' + f + '.json')); print(f, {k: v for k, v in d.items() if not isinstance(v, (dict, list))})
    except Exception as e: print(f, 'no json', e)
PY
cp .gpu/call_s11d.sh $R/call.sh
