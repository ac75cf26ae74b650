# Session 8 call 3: TRL alone, then ours alone (same GPU, same 16 cores), then Qwen2.5-1.5B layouts on 4 GPUs.
source .gpu/env.sh
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
B="taskset -c 0-15 python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1"
export CUDA_VISIBLE_DEVICES=0
echo "== trl $(date +%T)"
timeout 200 taskset -c 0-15 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log
echo "== ours $(date +%T)"
timeout 80 $B > $R/new.json 2> $R/new.log
timeout 80 $B --micro-batch 128 --remat full > $R/new_mb128_full.json 2> $R/new_mb128_full.log
unset CUDA_VISIBLE_DEVICES
echo "== 1.5B $(date +%T)"
timeout 230 $L --model qwen2_5_1_5b_instruct --out $R/layouts_1_5b.json --layouts one_device,fsdp4_rollout_same,fsdp4_rollout_auto,fsdp4_rollout_dp2_tp2 > $R/layouts_1_5b.log 2>&1
echo "== end $(date +%T)"
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('trl', 'new', 'new_mb128_full'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu','first_step_done_s')})
    except Exception as e: print(f, 'no json', e)
try:
    d = json.load(open('$R/layouts_1_5b.json'))
    for k, v in d['layouts'].items(): print(k, {x: (round(v[x], 4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','rollout_mesh','speedup_over_one_device','update_mfu','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})
except Exception as e: print('layouts', e)
PY
tail -2 $R/layouts_1_5b.log | cut -c1-300
pack d
