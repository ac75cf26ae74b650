# Session 8 call 2: jitted reshard (2- and 4-GPU layouts), TRL and ours on one pinned GPU, decode kernel profile, startup phases.
source .gpu/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1"
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false"
echo "== A $(date +%T)"
( export CUDA_VISIBLE_DEVICES=0,1
  timeout 250 taskset -c 0-31 $L --out $R/layouts_2gpu.json --layouts one_device,fsdp2_rollout_same,fsdp2_rollout_dp2,tp2_rollout_dp2 > $R/layouts_2gpu.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=2
  timeout 170 taskset -c 32-47 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log
  timeout 90 taskset -c 32-47 $B > $R/new.json 2> $R/new.log
  timeout 90 taskset -c 32-47 $B --micro-batch 128 --remat full > $R/new_mb128_full.json 2> $R/new_mb128_full.log ) &
( export CUDA_VISIBLE_DEVICES=3
  timeout 70 taskset -c 48-63 python3 .gpu/decode_profile.py > $R/profile.json 2> $R/profile.log
  XLA_FLAGS=--xla_gpu_enable_triton_gemm=false timeout 60 taskset -c 48-63 python3 .gpu/decode_probe.py --tag no_triton_gemm > $R/probe_notriton.json 2> $R/probe_notriton.log
  for pass in cold warm; do
    s=$(date +%s.%N)
    CRUCIBLE_CACHE=/tmp/cc_first timeout 110 taskset -c 48-63 python3 run.py $RUN grpo.steps=3 grpo.micro_batch_size=auto backend.adapter.remat=full hydra.run.dir=$R/first_$pass > $R/first_$pass.log 2>&1
    echo "$pass rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" >> $R/first.txt
  done ) &
wait
echo "== B $(date +%T)"
timeout 200 $L --out $R/layouts_4gpu.json --layouts one_device,fsdp4_rollout_same,fsdp4_rollout_dp4,fsdp4_rollout_auto > $R/layouts_4gpu.log 2>&1
echo "== end $(date +%T)"
cat $R/first.txt
for p in cold warm; do python3 -c "
import json; s=json.load(open('$R/first_$p/summary.json')); print('$p startup', {k: round(v,1) for k,v in s['startup_s'].items() if v is not None})
rows=[json.loads(l) for l in open('$R/first_$p/metrics.jsonl')]
print('$p', [(r['step'], round(r['step_time_s'],2), round(r.get('compile_time_s',-1),2), round(r['rollout_time_s'],2), round(r['update_time_s'],2)) for r in rows])" 2>&1 | tail -2; done
for f in trl new new_mb128_full probe_notriton; do echo "-- $f"; python3 -c "
import json,sys
try: d=json.loads(open('$R/$f.json').read()[open('$R/$f.json').read().rfind('\n{'):])
except Exception as e: print('no json', e); sys.exit()
print({k: d.get(k) for k in ('device','micro_batch','setup_s','first_step_done_s','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu','rows128','rows16')})"; tail -1 $R/$f.log | cut -c1-300; done
for n in 2 4; do python3 -c "
import json; d=json.load(open('$R/layouts_${n}gpu.json'))
for k,v in d['layouts'].items(): print(k, {x: (round(v[x],4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})"; tail -2 $R/layouts_${n}gpu.log | cut -c1-300; done
python3 -c "
import json; d=json.load(open('$R/profile.json')); print('profile wall', d['wall_s'])
for name, p in d['processes'].items():
    if 'GPU' in name or 'gpu' in name:
        print(name, p['total_us'], p['events']); [print('  ', r) for r in p['top'][:30]]" 2>&1 | tail -70
rm -rf $R/first_*/checkpoints
pack c
