# Session 8 call 1: issue 15 (unrolled decode, TRL, first step, decode probe), then issue 14 (2-GPU layouts) and 11 (parity).
source .gpu/env.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import jax, torch, trl, transformers; print(jax.__version__, torch.__version__, trl.__version__, transformers.__version__, jax.devices())"
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false"
CB=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL
echo "== A $(date +%T)"
( export CUDA_VISIBLE_DEVICES=0
  timeout 130 $B > $R/new.json 2> $R/new.log
  timeout 140 $B --micro-batch 128 --remat full > $R/new_mb128_full.json 2> $R/new_mb128_full.log ) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 285 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log ) &
( export CUDA_VISIBLE_DEVICES=2
  for pass in cold warm; do
    s=$(date +%s.%N)
    CRUCIBLE_CACHE=/tmp/cc_first timeout 140 python3 run.py $RUN grpo.steps=3 grpo.micro_batch_size=auto backend.adapter.remat=full hydra.run.dir=$R/first_$pass > $R/first_$pass.log 2>&1
    echo "$pass rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" >> $R/first.txt
  done ) &
( export CUDA_VISIBLE_DEVICES=3
  timeout 95 python3 .gpu/decode_probe.py --tag default > $R/probe_default.json 2> $R/probe_default.log
  XLA_FLAGS="--xla_gpu_enable_command_buffer=$CB" timeout 95 python3 .gpu/decode_probe.py --tag while_graph > $R/probe_while.json 2> $R/probe_while.log
  XLA_FLAGS="--xla_gpu_enable_command_buffer=" timeout 90 python3 .gpu/decode_probe.py --tag no_graph > $R/probe_nograph.json 2> $R/probe_nograph.log ) &
wait
echo "== B $(date +%T)"
( export CUDA_VISIBLE_DEVICES=0,1
  timeout 235 python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1 --out $R/layouts_2gpu.json \
    --layouts one_device,fsdp2_rollout_same,fsdp2_rollout_dp2,tp2_rollout_dp2,fsdp2_rollout_tp2 > $R/layouts_2gpu.log 2>&1 ) &
( export CUDA_VISIBLE_DEVICES=2,3
  timeout 235 python3 -m framework.backends.maxtext.benchmarks.two_gpu_parity --steps 2 --out $R/parity $RUN > $R/parity.json 2> $R/parity.log ) &
wait
echo "== end $(date +%T)"
cat $R/first.txt
for f in new new_mb128_full trl; do echo "-- $f"; python3 -c "
import json,sys
try: d=json.load(open('$R/$f.json'))
except Exception as e: print('no json', e); sys.exit()
print({k: d.get(k) for k in ('device','attention','remat','micro_batch','setup_s','first_step_done_s','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})"; tail -2 $R/$f.log; done
for f in probe_default probe_while probe_nograph; do echo "-- $f"; cat $R/$f.json | tr -d '\n' | cut -c1-900; echo; tail -2 $R/$f.log | cut -c1-300; done
for p in cold warm; do python3 -c "
import json; rows=[json.loads(l) for l in open('$R/first_$p/metrics.jsonl')]
print('$p', [(r['step'], round(r['step_time_s'],2), round(r.get('compile_time_s',-1),2), round(r['rollout_time_s'],2), round(r['update_time_s'],2)) for r in rows])" 2>&1 | tail -1; grep -i "micro" $R/first_$p.log | head -2; done
python3 -c "
import json; d=json.load(open('$R/layouts_2gpu.json'))
for k,v in d['layouts'].items(): print(k, {x: v.get(x) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})"
tail -3 $R/layouts_2gpu.log | cut -c1-400
python3 -c "
import json; d=json.load(open('$R/parity.json')); print({k: v.get('max_relative_difference') for k,v in d['layouts'].items()})"; tail -3 $R/parity.log | cut -c1-400
rm -rf $R/first_*/checkpoints $R/parity/*/checkpoints
pack b
