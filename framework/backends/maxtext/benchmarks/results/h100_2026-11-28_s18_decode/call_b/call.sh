# Session 18 call B (one GPU): the append kernel's block size, stages and warps against 85ea9c2 (.gpu/base), alternating.
source .gpu/env.sh
R=$OUT/results/s18b; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s18b.tgz -C $OUT/results s18b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
P="--hardware $HW --prefix-cache off"
run() {  # name, settings
  timeout 100 python3 -c "import runpy,sys; import framework.backends.maxtext.models.decode_attention as d; $2; sys.argv=['decode_probe']+sys.argv[1:]; runpy.run_module('framework.backends.maxtext.benchmarks.decode_probe', run_name='__main__')" $P > $R/$1.json 2> $R/$1.log; echo "$1 rc=$?"
}
( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m framework.backends.maxtext.benchmarks.decode_probe $P > $R/base_1.json 2> $R/base_1.log; echo "base rc=$?" )
run bk128 "d.KERNEL_BLOCK=128"
run st3 "d.NUM_STAGES=3"
run bk128_st3 "d.KERNEL_BLOCK=128; d.NUM_STAGES=3"
run bk128_w8 "d.KERNEL_BLOCK=128; d.NUM_WARPS=8"
( cd .gpu/base && PYTHONPATH=/tmp/site:$PWD timeout 100 python3 -m framework.backends.maxtext.benchmarks.decode_probe $P > $R/base_2.json 2> $R/base_2.log; echo "base rc=$?" )
run default "pass"
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        print(os.path.basename(f), " ".join(f"{r}: {v['ms_per_step_after_prefill']:.4f} ms ({v['tokens_per_s']:.0f}/s)" for r, v in ((r, v.get('off', v)) for r, v in d["rows"].items())))
    except Exception as e: print(f, "unreadable", e)
PY
