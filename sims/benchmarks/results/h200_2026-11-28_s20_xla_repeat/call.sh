# Session 20 call G (one H200): call D's forward calibration again (0.5B + one-layer 8B), now recording which form of
# each merged GEMM was kept and the other's time: a second run for the refit, and the record of the forms.
source .gpu/env.sh
R=$OUT/results/s20g_$HW; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s20g_$HW.tgz -C $OUT/results s20g_$HW" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 330 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --out $R/xla > $R/xla.log 2>&1; echo "forward rc=$?"
grep -n "budget" $R/xla.log; tail -4 $R/xla.log
