# Session 10 call H (4 GPUs, lent at the end of the session): NCCL collectives on 4 GPUs as CUDA-graph replays
# (issue 12), then the GRPO layouts at the recipe's micro-batch 128 + remat full on 4 GPUs (issue 14).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -4
echo "== collectives $(date +%T)"
timeout 80 $TR --nproc_per_node 4 -m sims.calibration.collectives measure --out $R/coll > $R/coll_4.log 2>&1; echo "coll rc=$?"
ls $R/coll 2>/dev/null
echo "== layouts $(date +%T)"
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1 --micro-batch 128 --remat full"
timeout 190 $L --out $R/layouts_4gpu_mb128.json --layouts one_device,fsdp4_rollout_dp4 > $R/layouts_4gpu_mb128.log 2>&1; echo "layouts rc=$? $(date +%T)"
python3 - <<PY
import json
d = json.load(open('$R/layouts_4gpu_mb128.json'))
for k, v in d['layouts'].items(): print(k, {x: (round(v[x], 4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','update_mfu','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})
PY
