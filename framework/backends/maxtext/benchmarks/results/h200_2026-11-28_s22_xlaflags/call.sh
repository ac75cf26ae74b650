# Session 22 call A (one H200): XLA GEMM / command-buffer settings against the rollout's decode step
# (decode_probe, Qwen2.5-0.5B shapes, 128 and 16 rows, repeated prompt cache), each setting in its own process.
source .gpu/env.sh
R=$OUT/results/s22a; mkdir -p $R; cp "$0" $R/call.sh; echo 769d0c6 > $R/commit.txt
trap "tar czf $OUT/s22a.tgz -C $OUT/results s22a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
python3 -c "import jax, jaxlib; print('jax', jax.__version__, jaxlib.__version__)" | tee $R/versions.txt
declare -A FLAGS=(
  [base]=""
  [cublas]="--xla_gpu_enable_triton_gemm=false"
  [cublaslt]="--xla_gpu_enable_triton_gemm=false --xla_gpu_enable_cublaslt=true"
  [cmdbuf_while]="--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
  [no_cmdbuf]="--xla_gpu_enable_command_buffer="
  [autotune0]="--xla_gpu_autotune_level=0"
)
for name in cublas cublaslt cmdbuf_while no_cmdbuf autotune0; do   # an unknown flag stops XLA: check each first
  XLA_FLAGS="${FLAGS[$name]}" timeout 60 python3 -c "import jax.numpy as j; j.ones(3).block_until_ready()" \
    > /dev/null 2> $R/flagcheck_$name.log || { echo "flag unknown: $name"; unset "FLAGS[$name]"; }
done
P="-m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache off"
for name in base cublas cmdbuf_while cublaslt no_cmdbuf autotune0 base_2 cublas_2; do
  key=${name%_2}; [[ -v "FLAGS[$key]" ]] || continue
  [ $SECONDS -gt 500 ] && { echo "time up before $name"; break; }
  XLA_FLAGS="${FLAGS[$key]}" timeout 80 python3 $P > $R/$name.json 2> $R/$name.log; echo "$name rc=$? at ${SECONDS}s"
done
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        t = open(f).read(); d = json.loads(t[t.find("{"):])
        print(os.path.basename(f), " ".join(f"{r}: {v['ms_per_step_after_prefill']:.4f} ms ({v['tokens_per_s']:.0f}/s)"
                                            for r, v in ((r, v.get('off', v)) for r, v in d["rows"].items())))
    except Exception as e: print(os.path.basename(f), "unreadable", e)
PY
