# Session 16 call C (one H200): (1) the shared-prefix decode cache against the repeated one (wt-prefix, .gpu/prefix),
# both in one process, alternating; (2) the xla stack calibrated at Qwen2.5-1.5B shapes (main), its whole steps held out.
source .gpu/env.sh
R=$OUT/results/s16c; mkdir -p $R; trap "tar czf $OUT/s16c.tgz -C $OUT/results s16c" EXIT
cp "$0" $R/; cat .gpu/s16.commit > $R/commit.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
( cd .gpu/prefix && PYTHONPATH=/tmp/site:$PWD timeout 240 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache both > $R/prefix_ab.json 2> $R/prefix_ab.log )
echo "prefix A/B rc=$? (t=$((SECONDS-T0)))"; tail -c 1500 $R/prefix_ab.json; tail -3 $R/prefix_ab.log
timeout $((570-(SECONDS-T0))) python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --models qwen2_5_1_5b_instruct --budget-s 170 --out $R/xla_1_5b > $R/xla_1_5b.log 2>&1
echo "xla_calibrate rc=$? (t=$((SECONDS-T0)))"; tail -25 $R/xla_1_5b.log
