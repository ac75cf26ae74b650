# Session 26 call A (2 x H200, the first several-GPU machine lent since session 18): held-out multi-GPU checks
# of the shipped tables on a fresh machine: NCCL collectives on 2 GPUs (CUDA-graph replays; the tables hold
# session 9's), torch_fused tp=2 (4-layer Qwen3-8B) and ep=2 (4-layer Qwen3-30B-A3B) whole steps against the
# shipped h200_torch_fused.json, the sim_sweep layouts on 2 GPUs against h200.json; then the megatron recipe as
# typed on 1 GPU, dp=2 and tp=2, each run's own preflight (megatron_local stack) against its measured step.
source .gpu/env.sh
R=$OUT/results/s26a; mkdir -p $R; cp "$0" $R/call.sh; echo 7b36f83 > $R/commit.txt
trap "tar czf $OUT/s26a.tgz -C $OUT/results s26a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
TR="python3 -m torch.distributed.run --nproc_per_node 2"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/megatron/*.whl && echo megatron ok
timeout 80 $TR -m sims.calibration.collectives measure --out $R/coll > $R/coll_2.log 2>&1; echo "coll rc=$? ${SECONDS}s"
timeout 120 $TR -m sims.benchmarks.torch_fused --table sims/calibration/tables/h200_torch_fused.json \
  --out $R/fused_tp2 > $R/fused_tp2.log 2>&1; echo "tp2 rc=$? ${SECONDS}s"
timeout 120 $TR -m sims.benchmarks.torch_fused --moe --table sims/calibration/tables/h200_torch_fused.json \
  --out $R/moe_ep2 > $R/moe_ep2.log 2>&1; echo "ep2 rc=$? ${SECONDS}s"
timeout 100 $TR -m sims.benchmarks.layouts --out $R/layouts_2gpu.json > $R/layouts_2.log 2>&1; echo "layouts rc=$? ${SECONDS}s"
for f in fused_tp2 moe_ep2; do echo "--- $f"; tail -9 $R/$f/*.md 2>/dev/null; done
M="recipe=pretrain_megatron hardware=h200 pretrain.steps=12 pretrain.eval.every=0 pretrain.checkpoint.every=0 \
pretrain.export_hf=false progress=false backend.adapter.cache_dir=/tmp/meg_cache"
left() { echo $((560-SECONDS)); }
timeout $(left) python3 run.py $M hydra.run.dir=$R/meg_1gpu > $R/meg_1gpu.log 2>&1; echo "meg1 rc=$? ${SECONDS}s"
timeout $(left) $TR run.py $M parallel.tp=1 hydra.run.dir=$R/meg_dp2 > $R/meg_dp2.log 2>&1; echo "megdp2 rc=$? ${SECONDS}s"
timeout $(left) $TR run.py $M parallel.tp=2 hydra.run.dir=$R/meg_tp2 > $R/meg_tp2.log 2>&1; echo "megtp2 rc=$? ${SECONDS}s"
for d in meg_1gpu meg_dp2 meg_tp2; do python3 - $R/$d <<'PY'
import json, sys, pathlib
p = pathlib.Path(sys.argv[1]) / "summary.json"
if not p.exists(): print(sys.argv[1], "no summary"); sys.exit()
s = json.loads(p.read_text()); m, q = s.get("measured_step_s"), s.get("preflight_predicted_step_s")
print(p.parent.name, "measured", m, "predicted", q, "ratio", m / q if m and q else None)
PY
done
tail -4 $R/meg_*.log
