# Session 11 call A (4 GPUs): NCCL collectives on 4 GPUs as CUDA-graph replays, tp=4 and ep=4 whole-step
# accuracy of the torch_fused stack with them fitted into the shipped table (issue 12), then the GRPO
# layouts at the recipe's micro-batch 128 + remat full on 4 GPUs (issue 14).
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
echo "== collectives $(el)"
timeout 80 $TR --nproc_per_node 4 -m sims.calibration.collectives measure --out $R/coll > $R/coll_4.log 2>&1; echo "coll rc=$? $(el)"
TAB=sims/calibration/tables/${HW}_torch_fused.json
python3 -m sims.calibration.collectives fit --hardware conf/hardware/$HW.yaml --table $TAB --out $R/tp4_table.json $R/coll/collectives_4.json > $R/fit.log 2>&1; echo "fit rc=$? $(el)"
echo "== layouts $(el)"
L="python3 -m framework.backends.maxtext.benchmarks.grpo_layouts --hardware $HW --steps 3 --warmup 1 --micro-batch 128 --remat full"
timeout 190 $L --out $R/layouts_4gpu_mb128.json --layouts one_device,fsdp4_rollout_dp4 > $R/layouts_4gpu_mb128.log 2>&1; echo "layouts rc=$? $(el)"
python3 - <<PY
import json
d = json.load(open('$R/layouts_4gpu_mb128.json'))
for k, v in d['layouts'].items(): print(k, {x: (round(v[x], 4) if isinstance(v.get(x), float) else v.get(x)) for x in ('step_s','rollout_s','update_s','reshard_s','speedup_over_one_device','update_mfu','preflight_predicted_step_s','measured_over_predicted','first_grad_norm_relative_difference','error')})
PY
echo "== tp4 $(el)"
timeout $((470-(SECONDS-T0))) $TR --nproc_per_node 4 -m sims.benchmarks.torch_fused --table $R/tp4_table.json --out $R/fused_tp4 > $R/fused_tp4.log 2>&1; echo "tp4 rc=$? $(el)"
tail -12 $R/fused_tp4/*.md 2>/dev/null
echo "== ep4 $(el)"
timeout $((570-(SECONDS-T0))) $TR --nproc_per_node 4 -m sims.benchmarks.torch_fused --moe --table $R/tp4_table.json --out $R/moe_ep4 > $R/moe_ep4.log 2>&1; echo "ep4 rc=$? $(el)"
tail -12 $R/moe_ep4/*.md 2>/dev/null
cp .gpu/call_s11a.sh $R/call.sh
