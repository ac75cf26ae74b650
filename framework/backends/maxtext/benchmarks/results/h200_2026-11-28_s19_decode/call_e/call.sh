# Session 19 call E (one H200): decode GEMMs timed with outputs apart (as the calibration) vs merged; a kernel profile
# of the decode step (which kernels the compiled step runs at 128 rows).
source .gpu/env.sh
R=$OUT/results/s19e; mkdir -p $R; cp "$0" $R/call.sh; cp .gpu/s19e_gemm.py $R/s19e_gemm.py.txt
trap "tar czf $OUT/s19e.tgz -C $OUT/results s19e" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 140 python3 .gpu/s19e_gemm.py qwen2_5_0_5b_instruct qwen3_8b > $R/gemm.json 2> $R/gemm.log; echo "gemm rc=$?"
grep "^{'model" $R/gemm.json
timeout 90 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off --profile $R/prof > $R/profile.json 2> $R/profile.log; echo "profile rc=$?"
rm -rf $R/prof
python3 - $R <<'PY'
import json, sys
t = open(sys.argv[1] + "/profile.json").read(); d = json.loads(t[t.find("{"):])
for dev, k in d.get("kernels", {}).items():
    if "GPU" in dev:
        print(dev, k["total_us"])
        for t in k["top"][:28]: print("  ", str(t)[:220])
PY
