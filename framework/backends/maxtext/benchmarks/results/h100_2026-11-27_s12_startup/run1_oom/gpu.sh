# Issue 15 (helper "startup"): time to the first finished step with ahead-of-time background compiles
# (backend.adapter.aot_compile=true, the default on this branch) on a FRESH single-GPU machine.
# (a) cold: empty CRUCIBLE_CACHE (random-init model build + empty JAX cache), as s11 call E's first_cold;
# (b) warm: same cache dir again (model dir present, JAX compilation cache filled by (a));
# (c) cold again with aot_compile=false (this branch, old sequential path) into a second empty cache, for
#     a same-machine comparison (model build repeated; JAX cache empty).
# Estimated: (a) ~50-65 s, (b) ~20-30 s, (c) ~65 s -> about 3 minutes of GPU time (timeouts 150+100+150 s).
source .gpu/env.sh
R=$OUT/results/startup; mkdir -p $R
cp "$0" $R/gpu.sh 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"
[ -n "${STARTUP_CPU_CHECK:-}" ] && RUN="recipe=grpo_gsm8k_cpu grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"  # the script's logic on a CPU
report() {  # $1 = name
python3 -c "
import json; s=json.load(open('$R/$1/summary.json')); print('$1 startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
m=s['result']['metrics']; print('$1', {k: (round(m[k],2) if isinstance(m.get(k), float) else m.get(k)) for k in ('micro_batch_size','remat','measured_step_s','init_compile_time_s','aot_compile_s','aot_wall_s','aot_overlap_init_s','aot_wait_s','aot_fallbacks')})
rows=[json.loads(l) for l in open('$R/$1/metrics.jsonl')]
print('$1 steps (step, step_time_s, compile_time_s, rollout_time_s, update_time_s)', [(r['step'], round(r['step_time_s'],2), round(r.get('compile_time_s',-1),2), round(r['rollout_time_s'],2), round(r['update_time_s'],2)) for r in rows if 'step_time_s' in r])" 2>&1 | tee -a $R/first.txt
grep -n "aot:" $R/$1.log | cut -c1-220 | tee -a $R/first.txt
rm -rf $R/$1/checkpoints
}
go() {  # $1 = name, $2 = cache dir, $3 = timeout, rest = overrides
name=$1; cache=$2; limit=$3; shift 3
s=$(date +%s.%N)
CRUCIBLE_CACHE=$cache timeout $limit python3 run.py $RUN "$@" hydra.run.dir=$R/$name > $R/$name.log 2>&1
echo "$name rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))") (launch to exit)" | tee -a $R/first.txt
report $name
}
rm -rf /tmp/cc_cold /tmp/cc_cold2  # empty caches (a fresh machine has none; this also makes a rerun honest)
go aot_cold /tmp/cc_cold 150
go aot_warm /tmp/cc_cold 100
go noaot_cold /tmp/cc_cold2 150 backend.adapter.aot_compile=false
tail -n 3 $R/*.log > $R/log_tails.txt
