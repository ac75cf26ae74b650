# Session 12, main after every merge: `python3 run.py recipe=grpo_gsm8k` on a fresh H100 with empty caches (the first
# step with the ahead-of-time compiles; the preflight with the mapped h100_xla.json table).
source .gpu/env.sh
R=$OUT/results/final; mkdir -p $R; cp .gpu/final.sh $R/gpu.sh; cp .gpu/final.commit $R/commit.txt
nvidia-smi --query-gpu=name --format=csv,noheader > $R/card.txt
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=4"
s=$(date +%s.%N)
CRUCIBLE_CACHE=/tmp/cc_final timeout 200 python3 run.py $RUN hydra.run.dir=$R/cold > $R/cold.log 2>&1; echo "cold rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee $R/final.txt
python3 -c "
import json; s=json.load(open('$R/cold/summary.json')); st=s['startup_s']; m=s['result']['metrics']
print('startup', {k: round(v,1) for k,v in st.items() if v is not None})
print({k: (round(m[k],3) if isinstance(m.get(k), float) else m.get(k)) for k in ('micro_batch_size','remat','measured_step_s','preflight_predicted_step_s','preflight_prefill_s','preflight_decode_s','preflight_train_s','aot_compile_s','aot_wall_s','aot_wait_s','aot_fallbacks','update_mfu')})
rows=[json.loads(l) for l in open('$R/cold/metrics.jsonl')]
steps=[(r['step'], round(r['step_time_s'],3), round(r.get('compile_time_s',-1),2), round(r['rollout_time_s'],3), round(r['update_time_s'],3)) for r in rows if 'step_time_s' in r]
print('steps', steps); print('first step ends after launch: %.1f s' % (sum(v for v in st.values() if v is not None) + steps[0][1]))" 2>&1 | tee -a $R/final.txt
grep -n "auto ->\|preflight:" $R/cold.log | cut -c1-200 | tee -a $R/final.txt
rm -rf $R/cold/checkpoints; tar czf $OUT/final.tgz -C $OUT/results final
