# Session 19 call A (one H200): decode-step GEMM variants through XLA flags (split-K autotuning off, Triton TMA),
# then the xla stack's calibration with session 18's decode kernel (refit of h200_xla.json's decode attention).
source .gpu/env.sh
R=$OUT/results/s19a; mkdir -p $R; git rev-parse HEAD > $R/commit.txt 2>/dev/null; cp "$0" $R/call.sh
trap "tar czf $OUT/s19a.tgz -C $OUT/results s19a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
P="-m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off"
run_probe() { name=$1; shift; XLA_FLAGS="$*" timeout 80 python3 $P > $R/$name.json 2> $R/$name.log; echo "$name rc=$?"; }
run_probe main
run_probe nosplitk --xla_gpu_enable_split_k_autotuning=false
run_probe tma --xla_gpu_experimental_enable_triton_tma=true
run_probe main_again
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        print(os.path.basename(f), " ".join(f"{r}: {v['ms_per_step_after_prefill']:.4f} ms ({v['tokens_per_s']:.0f}/s)" for r, v in ((r, v.get('off', v)) for r, v in d["rows"].items())))
    except Exception as e: print(f, "unreadable", e)
PY
timeout 290 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --out $R/xla > $R/xla.log 2>&1; echo "calibrate rc=$?"
tail -25 $R/xla.log
