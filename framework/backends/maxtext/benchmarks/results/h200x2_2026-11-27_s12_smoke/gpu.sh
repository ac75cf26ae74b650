# Session 12, main after the merges: the GRPO recipe as a user types it, (1) one GPU, (2) one step off-policy on 2 GPUs.
source .gpu/env.sh
R=$OUT/results/smoke; mkdir -p $R; cp .gpu/smoke.sh $R/gpu.sh
nvidia-smi --query-gpu=name --format=csv,noheader > $R/card.txt
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=4"
report() {
python3 -c "
import json; s=json.load(open('$R/$1/summary.json')); st=s['startup_s']; m=s['result']['metrics']
print('$1 status', s['result'].get('status'), 'startup', {k: round(v,1) for k,v in st.items() if v is not None})
print('$1', {k: (round(m[k],3) if isinstance(m.get(k), float) else m.get(k)) for k in ('micro_batch_size','remat','measured_step_s','preflight_predicted_step_s','preflight_overlapped','aot_wall_s','aot_fallbacks','staleness','ratio_abs_deviation')})
rows=[json.loads(l) for l in open('$R/$1/metrics.jsonl')]
print('$1 steps', [(r['step'], round(r['step_time_s'],3), round(r['rollout_time_s'],3), round(r['update_time_s'],3), r.get('staleness')) for r in rows if 'step_time_s' in r])" 2>&1 | tee -a $R/smoke.txt
grep -n "auto ->\|preflight:\|rollout mesh\|mesh " $R/$1.log | cut -c1-200 | tee -a $R/smoke.txt
rm -rf $R/$1/checkpoints $R/$1/hf_export
}
CUDA_VISIBLE_DEVICES=0 timeout 170 python3 run.py $RUN hydra.run.dir=$R/one_gpu > $R/one_gpu.log 2>&1; echo "one_gpu rc=$?" | tee -a $R/smoke.txt; report one_gpu
timeout 170 python3 run.py $RUN hardware.devices_per_node=2 grpo.rollout_lag=1 parallel.rollout.placement=separate parallel.rollout.devices=1 hydra.run.dir=$R/lag1_2gpu > $R/lag1_2gpu.log 2>&1; echo "lag1_2gpu rc=$?" | tee -a $R/smoke.txt; report lag1_2gpu
tail -5 $R/*.log > $R/log_tails.txt
tar czf $OUT/smoke.tgz -C $OUT/results smoke
