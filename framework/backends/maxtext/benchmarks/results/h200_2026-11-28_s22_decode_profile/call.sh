# Session 22 call C (one H200): where the decode step's time goes now (jax 0.11.2, our decode kernel, merged GEMMs):
# decode_probe with a kernel profile of one generate at 128 and 16 rows.
source .gpu/env.sh
R=$OUT/results/s22c; mkdir -p $R; cp "$0" $R/call.sh; echo e3b1252 > $R/commit.txt
trap "tar czf $OUT/s22c.tgz -C $OUT/results s22c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 200 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off \
  --profile /tmp/prof > $R/decode_profile.json 2> $R/decode_profile.log; echo "probe rc=$?"
python3 - $R/decode_profile.json <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.find("{"):])
for rows, v in d["rows"].items():
    v = v.get("off", v); print(rows, "rows:", round(v["ms_per_step_after_prefill"], 4), "ms per decode step")
print(json.dumps({k: v for k, v in d.items() if k != "rows"}, indent=0)[:6000])
PY
