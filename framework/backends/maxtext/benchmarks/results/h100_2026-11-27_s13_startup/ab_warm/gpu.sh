# Session 13 A/B of the warm start on ONE fresh H100: A = wt-startup2 at 4f87010 (the rollout's compile before the
# tokenizer, threaded host read), B = dab0686 + the random_init fix (the first GPU run). A cold first (the model
# build + empty JAX cache), B once to fill its own programs, then warm runs alternating A, B, A, B. ~3 min.
source .gpu/env.sh
R=$OUT/results/ab13; mkdir -p $R; cp .gpu/ab13.sh $R/gpu.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/card.txt
for t in A B; do rm -rf /tmp/tree_$t; mkdir -p /tmp/tree_$t; tar xf .gpu/ab_$t.tar -C /tmp/tree_$t; done
RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"
go() {  # $1 = tree, $2 = name
  s=$(date +%s.%N)
  (cd /tmp/tree_$1 && PYTHONPATH=/tmp/site:/tmp/tree_$1 CRUCIBLE_CACHE=/tmp/ab_cache timeout 120 python3 run.py $RUN hydra.run.dir=$R/$2 > $R/$2.log 2>&1)
  echo "$2 rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))")" | tee -a $R/ab.txt
  python3 - "$R/$2" "$2" <<'PY' 2>&1 | tee -a $R/ab.txt
import json, sys
run, name = sys.argv[1], sys.argv[2]
s = json.load(open(f"{run}/summary.json")); m = s["result"]["metrics"]
phases = {k: round(v, 2) for k, v in (s.get("startup_s") or {}).items() if v is not None}
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
first = sum(phases.values()) + rows[0]["step_time_s"]
print(name, phases, "step1", round(rows[0]["step_time_s"], 2), "FIRST STEP ENDS", round(first, 1),
      {k: round(v, 2) for k, v in m.items() if k.startswith(("startup_", "aot_w", "aot_c")) and isinstance(v, float)})
PY
  rm -rf $R/$2/checkpoints
}
rm -rf /tmp/ab_cache
go A a_cold; go B b_fill; go A a_warm1; go B b_warm1; go A a_warm2; go B b_warm2
tar czf $OUT/ab13.tgz -C $OUT/results ab13
