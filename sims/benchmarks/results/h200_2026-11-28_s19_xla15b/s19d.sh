# Session 19 call D (one H200): the xla calibration's Qwen2.5-1.5B kernels and held-out steps with the decode kernel
# as it now runs (session 16 timed them through gqa).
source .gpu/env.sh
R=$OUT/results/s19d; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s19d.tgz -C $OUT/results s19d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 330 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --models qwen2_5_1_5b_instruct --budget-s 150 --out $R/xla15b > $R/xla15b.log 2>&1; echo "calibrate rc=$?"
tail -14 $R/xla15b.log
