# Session 17 call B (one GPU): first the maintained start-up measurement (cold = the machine's first command, then warm),
# then the fused decode-MLP kernels' probe (branch wt-gemm, unpacked in .gpu/gemm) against XLA.
source .gpu/env.sh
R=$OUT/results/s17b; mkdir -p $R; cp .gpu/s17b.commit $R/commit.txt; cp "$0" $R/call.sh
trap "tar czf $OUT/s17b.tgz -C $OUT/results s17b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
echo "== first step $(date +%T)"
timeout 240 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --out $R/first_step --hardware $HW --steps 4 \
  --cache /tmp/crucible_cache --cold a_cold --run a_cold "" --run b_warm "" > $R/first_step.txt 2>&1; echo rc=$?
grep -i "FIRST STEP\|rc=\|error" $R/first_step.txt | cut -c1-300
echo "== decode_mlp_probe $(date +%T)"
( cd .gpu/gemm && PYTHONPATH=/tmp/site:$PWD timeout 330 python3 -m framework.backends.maxtext.benchmarks.decode_mlp_probe --budget-s 250 > $R/decode_mlp.json 2> $R/decode_mlp.log; echo rc=$? )
tail -5 $R/decode_mlp.log | cut -c1-300
python3 - $R/decode_mlp.json <<'PY'
import json, sys
text = open(sys.argv[1]).read(); d = json.loads(text[text.find("{"):])
print(json.dumps(d, indent=None)[:6000])
PY
