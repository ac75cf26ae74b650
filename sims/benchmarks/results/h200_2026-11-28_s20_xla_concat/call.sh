# Session 20 call C (one H200): call A's forward calibration again with a budget that times every node (call A's
# 190 s left 17 nodes of Qwen2.5-0.5B untimed, two of them decode-attention grid points).
source .gpu/env.sh
R=$OUT/results/s20c_$HW; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s20c_$HW.tgz -C $OUT/results s20c_$HW" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 400 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --budget-s 300 --out $R/xla > $R/xla.log 2>&1; echo "forward rc=$?"
grep -n "budget" $R/xla.log; tail -12 $R/xla.log
