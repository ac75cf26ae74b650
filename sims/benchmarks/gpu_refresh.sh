#!/usr/bin/env bash
# Every simulator measurement a GPU machine can refresh, into one folder (issue 12 and 13):
#   bash sims/benchmarks/gpu_refresh.sh OUT [GPUS]      # GPUS: 1, 2, 4 or 8 (default: all visible)
# Then, on any machine: copy OUT under sims/benchmarks/results/<card>_<date>/, list its files in
# sims/calibration/tables/refit.yaml, `python -m sims.calibration.refit --shipped`, and re-predict with
# `python -m sims.benchmarks.repredict` / `python -m sims.benchmarks.layouts --repredict` (docs/simulator.md,
# "Refreshing the tables on a GPU machine"). Every step writes its files before the next starts, so a
# failure keeps what was measured; each step's log is OUT/<step>.log.
set -uo pipefail
OUT=${1:?usage: gpu_refresh.sh OUT [GPUS]}
GPUS=${2:-$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)}
HW=$(python -c "from framework.core.hardware import detect; print(detect().option)")
HW_FILE=conf/hardware/$HW.yaml
MODELS="conf/model/qwen2_5_0_5b_instruct.yaml conf/model/qwen3_8b.yaml conf/model/qwen3_30b_a3b.yaml"
mkdir -p "$OUT"
echo "card: $HW ($GPUS GPUs) -> $OUT"

step() {  # step NAME COMMAND...: run it, log it, say how it went
  local name=$1; shift
  echo "== $name: $*"
  if "$@" > "$OUT/$name.log" 2>&1; then echo "   ok"; else echo "   FAILED (see $OUT/$name.log)"; fi
}

# one GPU: the transformers and torch_fused kernels, whole-model accuracy, fp8 GEMMs
step hf python -m sims.benchmarks.accuracy --out "$OUT/hf"
step fp8 python -m sims.calibration.microbench --hardware "$HW_FILE" --benchmarks gemm --fp8 --model $MODELS \
  --measurements "$OUT/fp8/measurements.json" --out "$OUT/fp8/table.json"
step fused_tp1 python -m sims.benchmarks.torch_fused --out "$OUT/fused_tp1"
step moe_ep1 python -m sims.benchmarks.torch_fused --moe --out "$OUT/moe_ep1"
step train python -m sims.benchmarks.train_steps --out "$OUT/train"

# several GPUs: collectives (CUDA-graph replays), tensor/expert-parallel accuracy, the sim_sweep layouts
for n in 2 4 8; do
  [ "$n" -le "$GPUS" ] || break
  step "coll_$n" torchrun --nproc_per_node "$n" -m sims.calibration.collectives measure --out "$OUT/coll"
  for kind in fused_tp1:fused_tp "moe_ep1:moe_ep --moe"; do
    base=${kind%%:*}; rest=${kind#*:}; tag=${rest%% *}; flag=${rest#"$tag"}
    table="$OUT/$base/${HW}_torch_fused.json"
    [ -f "$table" ] || continue
    step "fit_${tag}$n" python -m sims.calibration.collectives fit --hardware "$HW_FILE" --table "$table" \
      --out "$OUT/${tag}${n}_table.json" "$OUT/coll/collectives_$n.json"
    step "${tag}$n" torchrun --nproc_per_node "$n" -m sims.benchmarks.torch_fused $flag \
      --table "$OUT/${tag}${n}_table.json" --out "$OUT/${tag}$n"
  done
  step "layouts_$n" torchrun --nproc_per_node "$n" -m sims.benchmarks.layouts --out "$OUT/layouts_${n}gpu.json"
done
ls -R "$OUT" | head -80
