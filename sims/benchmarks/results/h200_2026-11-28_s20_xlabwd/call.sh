# Session 20 call B (one H200): the xla forward calibration of Qwen2.5-1.5B and the training kernels, with the
# merged-output GEMM benches, for the refit of h200_xla.json.
source .gpu/env.sh
R=$OUT/results/s20b_$HW; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s20b_$HW.tgz -C $OUT/results s20b_$HW" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 200 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --models qwen2_5_1_5b_instruct --budget-s 150 --out $R/xla15b > $R/xla15b.log 2>&1; echo "1.5B rc=$?"
tail -8 $R/xla15b.log
timeout 200 python3 -m framework.backends.maxtext.benchmarks.xla_backward --hardware $HW --out $R/xlabwd > $R/xlabwd.log 2>&1; echo "bwd rc=$?"
tail -8 $R/xlabwd.log
