# Session 20 call D (one H200): the xla forward calibration with the merged GEMMs timed both ways (the faster kept),
# Qwen2.5-0.5B + one-layer Qwen3-8B, then Qwen2.5-1.5B: the files h200_xla.json is refitted from.
source .gpu/env.sh
R=$OUT/results/s20d_$HW; mkdir -p $R; cp "$0" $R/call.sh; git rev-parse HEAD > $R/commit.txt 2>/dev/null
trap "tar czf $OUT/s20d_$HW.tgz -C $OUT/results s20d_$HW" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 350 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --budget-s 280 --out $R/xla > $R/xla.log 2>&1; echo "forward rc=$?"
grep -n "budget" $R/xla.log; tail -5 $R/xla.log
timeout 200 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --models qwen2_5_1_5b_instruct --budget-s 150 --out $R/xla15b > $R/xla15b.log 2>&1; echo "1.5B rc=$?"
grep -n "budget" $R/xla15b.log; tail -5 $R/xla15b.log
