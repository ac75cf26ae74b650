#!/bin/bash
# Session 13, for the lead to run on one H100 (about 6 minutes; not run yet): held-out checks of the session-13
# update model (docs/simulator.md "Session 13"). GRPO updates of Qwen2.5-0.5B, 128 x 512 tokens, that differ
# only in the micro-batch count: remat none at 16/32/64/128 (the per-layer scan time against the per-token
# copies on an H100: the fit used an H200 pair; 128 without remat may not fit the card) and remat minimal
# at 32/128. From the repository root:
#   OUT=/tmp/s13 bash framework/backends/maxtext/benchmarks/results/cpu_2026-11-27_s13_trainsteps/gpu_check.sh
# then, on any machine, re-predict the new files (add them to FILES in evaluate.py.txt, or):
#   PYTHONPATH=. python -m framework.backends.maxtext.benchmarks.xla_repredict \
#       --table sims/calibration/tables/h100_xla.json --out /tmp/s13/repredicted /tmp/s13/mb*.json
set -u
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | tee "$OUT/card.txt"
git log -1 --format=%H > "$OUT/commit.txt" 2>/dev/null
B="python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware h100"
for v in "16 none" "32 none" "64 none" "128 none" "32 minimal" "128 minimal"; do
  set -- $v
  echo "== mb$1 $2 $(date +%T)"
  timeout 120 $B --micro-batch "$1" --remat "$2" > "$OUT/mb$1_$2.json" 2> "$OUT/mb$1_$2.log"; echo "rc=$?"
  python3 -c "import json,sys; t=open(sys.argv[1]).read(); r=json.loads(t[t.rfind('\n{')+1:] if not t.lstrip().startswith('{') else t); print({k: r[k] for k in ('micro_batch','remat','update_s','step_s') if k in r})" "$OUT/mb$1_$2.json" 2>&1 | tail -1
done
