# Session 17 call E (one GPU): the sampler's prefill packed (main) against masked over every cache slot (c693d00 in
# .gpu/base), decode_probe alternating: the recipe's 256-token prompts twice each, 2,048-token prompts once each.
source .gpu/env.sh
R=$OUT/results/s17e; mkdir -p $R; echo "main $(cat .gpu/s17e.commit) vs base c693d00" > $R/commit.txt; cp "$0" $R/call.sh
trap "tar czf $OUT/s17e.tgz -C $OUT/results s17e" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
P="-m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off"
for i in 1 2; do
  timeout 110 python3 $P > $R/p256_main_$i.json 2> $R/p256_main_$i.log; echo "main $i rc=$?"
  ( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 110 python3 $P > $R/p256_base_$i.json 2> $R/p256_base_$i.log; echo "base $i rc=$?" )
done
timeout 130 python3 $P --prompt-tokens 2048 --steps 3 > $R/p2048_main.json 2> $R/p2048_main.log; echo "main 2048 rc=$?"
( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 130 python3 $P --prompt-tokens 2048 --steps 3 > $R/p2048_base.json 2> $R/p2048_base.log; echo "base 2048 rc=$?" )
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/p*.json")):
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        for rows, v in d["rows"].items():
            v = v.get("off", v)
            print(os.path.basename(f), rows, {k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.items()})
    except Exception as e: print(f, "unreadable", e)
PY
