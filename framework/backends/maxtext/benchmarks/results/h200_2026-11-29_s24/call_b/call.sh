# Session 24 call B (one H200): the vocabulary head again, now the update's chunked head over two chunks (call A's
# one-chunk vjp let XLA share the logits GEMM with the recompute), four models; then every training kernel of
# Llama-3.2-1B (head dim 64, GQA 4) at micro-batches 64 and 16 and Qwen2.5-1.5B (head dim 128) at 32, 512 tokens.
source .gpu/env.sh
R=$OUT/results/s24b; mkdir -p $R; cp "$0" $R/call.sh; echo 70a5db1 > $R/commit.txt
trap "tar czf $OUT/s24b.tgz -C $OUT/results s24b" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
timeout 300 python3 -m framework.backends.maxtext.benchmarks.xla_vocab --hardware $HW --out $R/vocab > $R/vocab.log 2>&1
echo "vocab rc=$? at ${SECONDS}s"; grep -v "^\[.*s\] *$" $R/vocab.log | tail -14
timeout 330 python3 -m framework.backends.maxtext.benchmarks.xla_backward --hardware $HW --budget-s 240 \
  --models llama3_2_1b:64,16 qwen2_5_1_5b_instruct:32 --out $R/bwd > $R/bwd.log 2>&1
echo "bwd rc=$? at ${SECONDS}s"; grep -i "attention\|FAIL\|skipped" $R/bwd.log | head -20
