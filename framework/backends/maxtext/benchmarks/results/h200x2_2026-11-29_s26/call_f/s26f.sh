# Session 26 call F (2 x H200): the GRPO rollout's decode of Qwen2.5-1.5B alone (decode_probe: 16 x 8 rows of 256 + 256
# tokens, the recipe's shapes) on a tp=2 mesh over both GPUs and on one GPU, each profiled: the 2-GPU recipe run with
# parallel.rollout.tp=2 (call B) decoded 10% slower than its preflight, session 21's 8B 13%; then a sixth held-out run
# of the transformers and torch_fused accuracy cases on GPU 0 (the memory-bound GEMM rule's first fresh data).
# Predictions written before the call: pred_before_s26f.txt.
source .gpu/env.sh
R=$OUT/results/s26f; mkdir -p $R; cp "$0" .gpu/pred_before_s26f.txt $R/; echo 832f6bc > $R/commit.txt
trap "tar czf $OUT/s26f.tgz -C $OUT/results s26f" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
D="python3 -m framework.backends.maxtext.benchmarks.decode_probe --model qwen2_5_1_5b_instruct --hardware $HW --steps 3"
timeout 150 $D --tp 2 --profile /tmp/prof_tp2 > $R/decode_tp2.json 2> $R/decode_tp2.log; echo "tp2 rc=$? ${SECONDS}s"
CUDA_VISIBLE_DEVICES=0 timeout 120 $D --profile /tmp/prof_tp1 > $R/decode_tp1.json 2> $R/decode_tp1.log; echo "tp1 rc=$? ${SECONDS}s"
python3 - $R <<'PY'
import json, sys
for tag in ("tp2", "tp1"):
    try:
        d = json.load(open(f"{sys.argv[1]}/decode_{tag}.json"))
    except Exception as e:
        print(tag, "unreadable", e); continue
    print(tag, d["mesh"], {r: {k: round(v, 4) for k, v in f.items()} for r, f in d["rows"].items()})
    for proc, table in d.get("kernels", {}).items():
        if "CPU" in proc: continue
        print("  ", proc, round(table["total_us"]), table["events"])
        for row in table["top"][:12]: print("     ", row[:3])
PY
left() { echo $((450-SECONDS)); }
CUDA_VISIBLE_DEVICES=0 timeout $(left) python3 -m sims.benchmarks.accuracy --out $R/hf > $R/hf.log 2>&1; echo "hf rc=$? ${SECONDS}s"
CUDA_VISIBLE_DEVICES=0 timeout $(left) python3 -m sims.benchmarks.torch_fused --out $R/fused_tp1 > $R/fused_tp1.log 2>&1; echo "fused rc=$? ${SECONDS}s"
tail -3 $R/hf.log
