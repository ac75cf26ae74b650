# Session 18 call E (same 4 x H200 machine, GPU 0): the recipe on one GPU, 85ea9c2 (.gpu/base) then main's tree.
source .gpu/env.sh
R=$OUT/results/s18e; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s18e.tgz -C $OUT/results s18e" EXIT
( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --out $R/base --hardware $HW --limit-s 70 --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" > $R/base.txt 2>&1; echo base rc=$?; grep -E "steps|median" $R/base.txt )
timeout 90 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --out $R/main --hardware $HW --limit-s 70 --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" > $R/main.txt 2>&1; echo main rc=$?; grep -E "steps|median" $R/main.txt
