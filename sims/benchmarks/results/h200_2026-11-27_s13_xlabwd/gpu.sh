#!/usr/bin/env bash
# Issue 12 (branch wt-xlabwd): the `xla` stack's training kernels on ONE GPU (H100 or H200): every node
# the GRPO update runs, forward and forward+backward (jax.vjp), at Qwen2.5-0.5B 128x512 and 16x512 and a
# Qwen3-8B layer at 16x512, the chunked vocabulary log-prob, gradient accumulation and optax AdamW over
# the 0.5B params (framework/backends/maxtext/benchmarks/xla_backward.py), then the table refitted with
# the card's shipped forward calibration (--base). Estimate: ~3 min (timing budget 150 s + compile/start);
# hard cap 280 s by `timeout`.
# CPU check of the logic:  CPU_CHECK=1 OUT=/tmp/x bash gpu.sh
set -u
if [ "${CPU_CHECK:-0}" = 1 ]; then
  OUT=${OUT:-/tmp/xlabwd_gpu_check}; HW=cpu; EXTRA="--tiny"; export JAX_PLATFORMS=cpu
  BASE=${BASE:-}
else
  source .gpu/env.sh
  EXTRA="--budget-s 150"
  case "$HW" in
    h100) BASE=sims/benchmarks/results/h100_2026-11-26_s10_xla2/microbench.json ;;
    h200) BASE=sims/benchmarks/results/h200x4_2026-11-26_s11_callB/xla/microbench.json ;;
    *) BASE= ;;
  esac
fi
R=$OUT/results/xlabwd13; mkdir -p $R
cp "$0" $R/gpu.sh 2>/dev/null
[ "${CPU_CHECK:-0}" = 1 ] || nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $R/card.txt
echo "HW=$HW BASE=$BASE" | tee $R/env.txt
T0=$SECONDS
B=""; [ -n "$BASE" ] && B="--base $BASE"
timeout 280 python3 -m framework.backends.maxtext.benchmarks.xla_backward --out $R/xla_bwd --hardware $HW $B $EXTRA \
  > $R/xla_bwd.log 2>&1
echo "xla_backward rc=$? after $((SECONDS-T0)) s" | tee -a $R/xla_bwd.log
tail -60 $R/xla_bwd.log
ls -la $R/xla_bwd
