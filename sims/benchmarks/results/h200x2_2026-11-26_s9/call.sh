# Session 9 call 4 (2 GPUs): sims/benchmarks/gpu_refresh.sh as shipped (issue 12), then the GRPO layouts with the
# Pallas decode kernel (issue 14).
source .gpu/env.sh
trap 'tar czf $OUT/results.tgz -C /tmp refresh results' EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== refresh $(date +%T)"
timeout 330 bash sims/benchmarks/gpu_refresh.sh /tmp/refresh 2 > /tmp/refresh_stdout.txt 2>&1; echo "refresh rc=$?"
mkdir -p /tmp/refresh; mv /tmp/refresh_stdout.txt /tmp/refresh/; grep -v "^/tmp\|^$" /tmp/refresh/refresh_stdout.txt | head -30
echo "== layouts $(date +%T)"
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1"
timeout 220 $L --out $R/layouts_2gpu.json --layouts one_device,fsdp2_rollout_same,fsdp2_rollout_dp2,tp2_rollout_dp2,fsdp2_rollout_tp2 > $R/layouts_2gpu.log 2>&1; echo "layouts rc=$? $(date +%T)"
python3 - <<PY
import json
d = json.load(open('$R/layouts_2gpu.json'))
for k, v in d['layouts'].items(): print(k, {x: (round(v[x], 4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','update_mfu','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})
PY
