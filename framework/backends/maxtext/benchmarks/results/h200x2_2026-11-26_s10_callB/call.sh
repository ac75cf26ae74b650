# Session 10 call B (2 GPUs): the GRPO layouts at the GPU recipe's new defaults (micro-batch 128 = the whole
# step, remat full), one GPU against 2-GPU update layouts with the rollout in data-parallel replicas (issue 14).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1 --micro-batch 128 --remat full"
echo "== layouts $(date +%T)"
timeout 420 $L --out $R/layouts_2gpu_mb128.json --layouts one_device,fsdp2_rollout_dp2,tp2_rollout_dp2,fsdp2_rollout_tp2 > $R/layouts_2gpu_mb128.log 2>&1; echo "layouts rc=$? $(date +%T)"
python3 - <<PY
import json
d = json.load(open('$R/layouts_2gpu_mb128.json'))
for k, v in d['layouts'].items(): print(k, {x: (round(v[x], 4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','update_mfu','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})
PY
tail -5 $R/layouts_2gpu_mb128.log
