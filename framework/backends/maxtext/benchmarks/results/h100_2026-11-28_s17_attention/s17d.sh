# Session 17 call D (one GPU): the Pallas decode-attention kernel's settings at the recipe's shapes, then the sampler
# with the fastest of them against the current ones (decode_probe, alternating).
source .gpu/env.sh
R=$OUT/results/s17d; mkdir -p $R; git log --oneline -1 > $R/commit.txt 2>/dev/null; cp "$0" .gpu/s17_patched_probe.py $R/
trap "tar czf $OUT/s17d.tgz -C $OUT/results s17d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
echo "== attention probe $(date +%T)"
timeout 300 python3 -m framework.backends.maxtext.benchmarks.decode_attention_probe --budget-s 200 > $R/attention.json 2> $R/attention.log; echo rc=$?
BEST=$(python3 -c "import json; t=open('$R/attention.json').read(); d=json.loads(t[t.find('{'):]); print(json.dumps(d['best']))")
python3 - $R/attention.json <<'PY'
import json, sys
t = open(sys.argv[1]).read(); d = json.loads(t[t.find("{"):])
print("current", d["current"]); print("best", d["best"])
for s in sorted([s for s in d["settings"] if "us_per_layer" in s], key=lambda s: s["us_per_layer"])[:12]: print(s)
print("errors", sum("error" in s for s in d["settings"]), "skipped", sum("skipped" in s for s in d["settings"]))
PY
echo "== decode_probe A/B with $BEST $(date +%T)"
for i in 1 2; do
  timeout 100 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW > $R/probe_current_$i.json 2> $R/probe_current_$i.log; echo "current rc=$?"
  ATTN="$BEST" timeout 100 python3 .gpu/s17_patched_probe.py --hardware $HW > $R/probe_best_$i.json 2> $R/probe_best_$i.log; echo "best rc=$?"
done
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/probe_*.json")):
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        print(os.path.basename(f), {r: round(v["ms_per_decode_step"], 4) for r, v in d["rows"].items()}, {r: round(v["tokens_per_s"]) for r, v in d["rows"].items()})
    except Exception as e: print(f, "unreadable", e)
PY
