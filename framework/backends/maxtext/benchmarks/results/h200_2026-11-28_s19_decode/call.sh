# Session 19 call B (one H200): the decode kernel with its slots in parts (working tree on f2fd417): on-card check,
# parts vs gqa across decode shapes, then decode_probe against f2fd417 (.gpu/base, the kernel in one part).
source .gpu/env.sh
R=$OUT/results/s19b; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s19b.tgz -C $OUT/results s19b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 100 python3 .gpu/s19_check.py > $R/check.json 2> $R/check.log; echo "check rc=$?"
python3 -c "import json; d=json.load(open('$R/check.json')); [print(k, round(v['max_abs_err'],5), v['cache_exact']) for k,v in d.items()]"
timeout 250 python3 -m framework.backends.maxtext.benchmarks.decode_attention_probe --budget-s 200 > $R/attention.json 2> $R/attention.log; echo "attention probe rc=$?"
python3 -c "
import json; d=json.load(open('$R/attention.json'))
for s in d['shapes']: print(s['rows'], s['live_to'], 'auto', s.get('auto_parts'), 'best', s.get('best'), {k: v.get('us_per_layer', v.get('error')) for k, v in s['settings'].items()}, round(max([v.get('max_abs_diff_vs_parts_1', 0) for v in s['settings'].values()] or [0]), 4))
"
P="-m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off"
timeout 75 python3 $P > $R/main.json 2> $R/main.log; echo "main rc=$?"
( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 75 python3 $P > $R/base.json 2> $R/base.log; echo "base rc=$?" )
python3 - $R <<'PY'
import json, os, sys
for f in ("main.json", "base.json"):
    try:
        t = open(os.path.join(sys.argv[1], f)).read(); d = json.loads(t[t.find("{"):])
        print(f, " ".join(f"{r}: {v['ms_per_step_after_prefill']:.4f} ms ({v['tokens_per_s']:.0f}/s)" for r, v in ((r, v.get('off', v)) for r, v in d["rows"].items())))
    except Exception as e: print(f, "unreadable", e)
PY
