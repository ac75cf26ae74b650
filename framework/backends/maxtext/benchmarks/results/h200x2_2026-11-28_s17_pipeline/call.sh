# Session 17 call A (2 GPUs): issue 14's 2-GPU pipeline on the asked-for pair (one GPU vs rollout|update lag 1,
# alternating), then decode_probe under XLA fusion flags (two lanes, one per GPU), the shared prefix at 512 prompt tokens.
source .gpu/env.sh
R=$OUT/results/s17a; mkdir -p $R; cp .gpu/s17a.commit $R/commit.txt; cp "$0" $R/call.sh
trap "tar czf $OUT/s17a.tgz -C $OUT/results s17a" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
echo "== recipe $(date +%T)"
timeout 400 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --hardware $HW --out $R/recipe --limit-s 120 \
  --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" \
  --run lag1 "hardware.devices_per_node=2 parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=1" \
  --run one_gpu_b "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" \
  --run lag1_b "hardware.devices_per_node=2 parallel.rollout.placement=separate parallel.rollout.devices=auto grpo.rollout_lag=1" \
  > $R/recipe.txt 2>&1; echo rc=$?; tail -40 $R/recipe.txt
echo "== probes $(date +%T)"
P="python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW"
probe() { tag=$1; shift; XLA_FLAGS="$*" timeout 110 $P > $R/probe_$tag.json 2> $R/probe_$tag.log; echo "$tag rc=$?"; }
( export CUDA_VISIBLE_DEVICES=0
  probe default
  probe heroless --xla_gpu_experimental_enable_triton_heroless_priority_fusion=true
  probe generic_gemm --xla_gpu_unsupported_enable_generic_triton_emitter_for_gemms=true
  probe splitk_off --xla_gpu_enable_split_k_autotuning=false ) &
( export CUDA_VISIBLE_DEVICES=1
  probe softmax_fusion --xla_gpu_enable_triton_softmax_priority_fusion=true
  probe block_rewriter --xla_gpu_experimental_enable_fusion_block_level_rewriter=true
  probe default_b
  timeout 150 $P --prefix-cache both --prompt-tokens 512 --steps 3 > $R/prefix_p512.json 2> $R/prefix_p512.log; echo "p512 rc=$?" ) &
wait
python3 - $R <<'PY'
import glob, json, os, sys
for f in sorted(glob.glob(sys.argv[1] + "/probe_*.json")):
    try:
        text = open(f).read(); d = json.loads(text[text.find("{"):])
        print(os.path.basename(f), {k: v for k, v in d.items() if not isinstance(v, (dict, list))}, json.dumps(d.get("rows", d))[:400])
    except Exception as e: print(f, "unreadable", e)
try:
    d = json.load(open(sys.argv[1] + "/prefix_p512.json"))
    for r, v in d["rows"].items(): print("p512", r, {k: round(v[k]["ms_per_decode_step"], 3) for k in ("on", "off")}, "off/on", round(v["off_s/on_s"], 3))
except Exception as e: print("p512 unreadable", e)
PY
