# Session 8 call 4: TRL alone and unpinned, then ours alone (GPU 0); then Qwen3-8B layouts on 4 GPUs until the time runs out.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW"
export CUDA_VISIBLE_DEVICES=0
echo "== trl $(date +%T)"
timeout 170 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log
echo "== ours $(date +%T)"
timeout 70 $B > $R/new.json 2> $R/new.log
timeout 70 $B --micro-batch 128 --remat full > $R/new_mb128_full.json 2> $R/new_mb128_full.log
unset CUDA_VISIBLE_DEVICES
python3 - <<PY
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
for f in ('trl', 'new', 'new_mb128_full'):
    try: d = last_json('$R/' + f + '.json'); print(f, {k: d.get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})
    except Exception as e: print(f, 'no json', e)
PY
echo "== 8B $(date +%T)"
timeout 250 python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 2 --warmup 1 --model qwen3_8b \
  --out $R/layouts_8b.json --layouts fsdp4_rollout_auto,fsdp4_rollout_dp2_tp2 > $R/layouts_8b.log 2>&1
echo "== end $(date +%T)"
python3 -c "
import json; d=json.load(open('$R/layouts_8b.json'))
for k,v in d['layouts'].items(): print(k, {x: (round(v[x],4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','rollout_mesh','update_mfu','preflight_predicted_step_s','measured_over_predicted','error')})"
tail -2 $R/layouts_8b.log | cut -c1-300
