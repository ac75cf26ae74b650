# Session 18 call A (one H100): the decode kernel that also writes the new K/V (main's working tree) against
# 85ea9c2 (.gpu/base: jax's gqa with its combine + two cache writes); correctness on the card first.
source .gpu/env.sh
R=$OUT/results/s18a; mkdir -p $R; echo "main=working tree on 85ea9c2 (fused append kernel) vs base 85ea9c2" > $R/commit.txt; cp "$0" $R/call.sh
trap "tar czf $OUT/s18a.tgz -C $OUT/results s18a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 120 python3 .gpu/s18_check.py > $R/check.json 2> $R/check.log; echo "check rc=$?"; cat $R/check.json | head -30
P="-m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off"
W2="import runpy,sys; import framework.backends.maxtext.models.decode_attention as d; d.NUM_WARPS=2; sys.argv=['decode_probe']+sys.argv[1:]; runpy.run_module('framework.backends.maxtext.benchmarks.decode_probe', run_name='__main__')"
for i in 1 2; do
  timeout 100 python3 $P > $R/main_$i.json 2> $R/main_$i.log; echo "main $i rc=$?"
  ( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 $P > $R/base_$i.json 2> $R/base_$i.log; echo "base $i rc=$?" )
  timeout 100 python3 -c "$W2" --hardware $HW --prefix-cache off > $R/warps2_$i.json 2> $R/warps2_$i.log; echo "warps2 $i rc=$?"
done
timeout 110 python3 $P --profile $R/prof > $R/main_profile.json 2> $R/main_profile.log; echo "profile rc=$?"
rm -rf $R/prof
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    if "check" in f: continue
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        for rows, v in d["rows"].items():
            v = v.get("off", v)
            print(os.path.basename(f), rows, {k: (round(x, 4) if isinstance(x, float) else x) for k, x in v.items()})
        for dev, k in d.get("kernels", {}).items():
            if "GPU" in dev:
                print(dev, k["total_us"])
                for t in k["top"][:30]: print("  ", str(t)[:200])
    except Exception as e: print(f, "unreadable", e)
PY
