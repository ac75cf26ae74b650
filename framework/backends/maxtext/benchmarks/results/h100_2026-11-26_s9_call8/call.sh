# Session 9 call 8 (one H100): Pallas decode kernel variants in the rollout.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 280 python3 .gpu/kernel_tune.py --hardware $HW > $R/kernel_tune.json 2> $R/kernel_tune.log; echo "rc=$?"
tail -1 $R/kernel_tune.json
