# Session 20 call A (one H200): the down projection four ways (which GEMM kernel XLA picks), then the xla forward
# calibration with the merged-output GEMM benches (dc4d997) for the refit of h200_xla.json.
source .gpu/env.sh
R=$OUT/results/s20a_$HW; mkdir -p $R; cp "$0" $R/call.sh; cp .gpu/s20_down.py $R/s20_down.py.txt
trap "tar czf $OUT/s20a_$HW.tgz -C $OUT/results s20a_$HW" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 100 python3 .gpu/s20_down.py > $R/down.json 2> $R/down.log; echo "down rc=$?"
grep "^{'model" $R/down.json
timeout 290 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --out $R/xla > $R/xla.log 2>&1; echo "forward rc=$?"
tail -14 $R/xla.log
