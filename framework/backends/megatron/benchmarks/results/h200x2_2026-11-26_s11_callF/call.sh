# Session 11 call F (2 GPUs): the megatron 1B step after the Float16Module change on one GPU, dp=2 and tp=2
# (issue 12's training steps), then the GRPO layouts at the recipe's settings (micro-batch 128, remat minimal) on 2 GPUs (issue 14).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
P="-m framework.backends.megatron.benchmarks.pretrain_step --layer-specs local_sdpa --no-baseline"
timeout 110 python3 $P --out $R/megatron_1b.json > $R/megatron_1b.log 2>&1; echo "1b rc=$? $(el)"
timeout 110 $TR --nproc_per_node 2 $P --tp 1 --out $R/megatron_dp2.json > $R/megatron_dp2.log 2>&1; echo "dp2 rc=$? $(el)"
timeout 110 $TR --nproc_per_node 2 $P --tp 2 --out $R/megatron_tp2.json > $R/megatron_tp2.log 2>&1; echo "tp2 rc=$? $(el)"
python3 - <<PY
import json
for f in ('1b', 'dp2', 'tp2'):
    try: d = json.load(open('$R/megatron_' + f + '.json')); print(f, d['device'], d['results'])
    except Exception as e: print(f, 'no json', e)
PY
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1 --micro-batch 128 --remat minimal"
timeout $((570-(SECONDS-T0))) $L --out $R/layouts_2gpu_mb128_minimal.json --layouts one_device,fsdp2_rollout_dp2 > $R/layouts.log 2>&1; echo "layouts rc=$? $(el)"
python3 - <<PY
import json
d = json.load(open('$R/layouts_2gpu_mb128_minimal.json'))
for k, v in d['layouts'].items(): print(k, {x: (round(v[x], 4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','update_mfu','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})
PY
cp .gpu/call_s11f.sh $R/call.sh
