#!/bin/bash
# The warm-cache CPU recipe: per tree and repetition a fresh CRUCIBLE_CACHE, one run to fill it (model build,
# compilation cache), then the same command again, timed; main and the branch alternating.
ARGS="recipe=grpo_gsm8k_cpu grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"
for rep in ${REPS:-1 2 3}; do
  for tree in /tmp/tokmain /tmp/tokbranch; do
    name=$(basename $tree); cache=/tmp/tokbench/cache_${name}_$rep
    cd $tree
    CRUCIBLE_CACHE=$cache python run.py $ARGS hydra.run.dir=/tmp/tokbench/fill_${name}_$rep > /dev/null 2>&1
    began=$(date +%s.%N)
    CRUCIBLE_CACHE=$cache python run.py $ARGS hydra.run.dir=/tmp/tokbench/timed_${name}_$rep > /tmp/tokbench/timed_${name}_$rep.out 2>&1
    status=$?; ended=$(date +%s.%N)
    wait_s=$(python -c "import json; m=json.load(open('/tmp/tokbench/timed_${name}_$rep/summary.json'))['result']['metrics']; print(round(m['startup_tokenizer_wait_s'], 3))")
    echo "rep $rep tree $name exit $status wall_s $(python -c "print(round($ended - $began, 2))") startup_tokenizer_wait_s $wait_s"
  done
done
