# Session 8 call 5: first step cold and warm with the torch-free tokenizer load (one GPU).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2 grpo.micro_batch_size=auto backend.adapter.remat=full"
for pass in cold warm; do
  s=$(date +%s.%N)
  CRUCIBLE_CACHE=/tmp/cc_first timeout 100 python3 run.py $RUN hydra.run.dir=$R/first_$pass > $R/first_$pass.log 2>&1
  echo "$pass rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee -a $R/first.txt
  python3 -c "
import json; s=json.load(open('$R/first_$pass/summary.json')); print('startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
rows=[json.loads(l) for l in open('$R/first_$pass/metrics.jsonl')]
print([(r['step'], round(r['step_time_s'],2), round(r.get('compile_time_s',-1),2)) for r in rows])"
done
rm -rf $R/first_*/checkpoints
