#!/usr/bin/env bash
# Session 15 call 2 (issue 14): the GSM8K recipe on one 4-GPU machine, main (no wait for the weight move, the next
# batch scored during the update) against the tree before the session (4b14aaf in .gpu/base), alternating; the
# main thread of one lag-2 run under cProfile; one GPU again with an empty JAX cache (is the rollout's 0.39 vs
# 0.41 s of call 1 a compile-to-compile difference?).
source .gpu/env.sh
ROOT=$PWD; R=$OUT/results; mkdir -p $R
trap 'tar czf $OUT/results.tgz -C $OUT results --remove-files 2>/dev/null; true' EXIT
cp .gpu/s15b.sh $R/call.sh; cp .gpu/s15.commit $R/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
RR="framework/backends/maxtext/benchmarks/recipe_runs.py --hardware $HW --limit-s 150"
SEP="hardware.devices_per_node=4 parallel.rollout.placement=separate parallel.rollout.devices=auto"
ONE="CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1"
ln -sfn $ROOT/outputs .gpu/base/outputs 2>/dev/null; mkdir -p outputs
base() { (cd .gpu/base && PYTHONPATH=/tmp/site:$PWD python3 $ROOT/$RR "$@"); }
python3 $RR --out $R/a_main --run lag2 "$SEP grpo.rollout_lag=2" --run one_gpu "$ONE" --run lag1 "$SEP grpo.rollout_lag=1"; echo "a $(el)"
base --out $R/b_base --run base_lag2 "$SEP grpo.rollout_lag=2" --run base_one_gpu "$ONE"; echo "b $(el)"
python3 $RR --out $R/c_main --run lag2_again "$SEP grpo.rollout_lag=2"; echo "c $(el)"
base --out $R/d_base --run base_lag2_again "$SEP grpo.rollout_lag=2"; echo "d $(el)"
timeout 120 python3 -m cProfile -o $R/lag2_main.prof run.py recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample \
  grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false hardware=$HW grpo.steps=8 \
  $SEP grpo.rollout_lag=2 hydra.run.dir=$R/prof_run > $R/prof_run.log 2>&1; echo "prof rc=$? $(el)"
python3 - $R/lag2_main.prof <<'PY' > $R/prof_top.txt 2>&1
import pstats, sys
p = pstats.Stats(sys.argv[1]); p.sort_stats("cumulative")
p.print_callees("_train_step"); p.print_stats(r"pipeline|grpo.py|update.py|rollout.py|sharding.py", 40)
PY
head -c 6000 $R/prof_top.txt
[ $((SECONDS-T0)) -lt 450 ] && python3 $RR --out $R/e_fresh_cache --run one_gpu_fresh_cache "$ONE backend.adapter.cache_dir=/tmp/fresh_cache"; echo "e $(el)"
echo "done $(el)"
