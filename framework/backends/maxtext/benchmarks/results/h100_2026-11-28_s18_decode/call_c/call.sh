# Session 18 call C (one GPU): main's working tree (the decode kernel that writes the new K/V, 3 stages) against
# 85ea9c2 (.gpu/base), decode_probe alternating twice, then one GRPO step benchmark each.
source .gpu/env.sh
R=$OUT/results/s18c; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s18c.tgz -C $OUT/results s18c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
P="-m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off"
G="-m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW --micro-batch 128 --remat minimal"
for i in 1 2; do
  timeout 90 python3 $P > $R/main_$i.json 2> $R/main_$i.log; echo "main $i rc=$?"
  ( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 $P > $R/base_$i.json 2> $R/base_$i.log; echo "base $i rc=$?" )
done
timeout 100 python3 $G > $R/step_main.json 2> $R/step_main.log; echo "step main rc=$?"
( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 $G > $R/step_base.json 2> $R/step_base.log; echo "step base rc=$?" )
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        if "rows" in d:
            print(os.path.basename(f), " ".join(f"{r}: {v['ms_per_step_after_prefill']:.4f} ms ({v['tokens_per_s']:.0f}/s)" for r, v in ((r, v.get('off', v)) for r, v in d["rows"].items())))
        else:
            print(os.path.basename(f), {k: v for k, v in d.items() if not isinstance(v, (dict, list))})
    except Exception as e: print(f, "unreadable", e)
PY
