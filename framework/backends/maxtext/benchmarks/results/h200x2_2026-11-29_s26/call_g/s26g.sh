# Session 26 call G (2 x H200): where a tp=2 decode step's extra 0.2-0.3 ms goes (call F: its kernels sum to the
# prediction, the step is 8-15% longer): the idle time between each GPU's kernels in the profiled generate, by the kind
# of kernel that ends each gap (gaps.py), at tp=2 and on one GPU.
source .gpu/env.sh
R=$OUT/results/s26g; mkdir -p $R; cp "$0" .gpu/gaps.py $R/; echo fb728d4 > $R/commit.txt
trap "tar czf $OUT/s26g.tgz -C $OUT/results s26g" EXIT
D="python3 -m framework.backends.maxtext.benchmarks.decode_probe --model qwen2_5_1_5b_instruct --hardware $HW --steps 1"
timeout 120 $D --tp 2 --profile /tmp/g_tp2 > $R/decode_tp2.json 2> $R/decode_tp2.log; echo "tp2 rc=$? ${SECONDS}s"
python3 .gpu/gaps.py /tmp/g_tp2 > $R/gaps_tp2.json; cat $R/gaps_tp2.json
CUDA_VISIBLE_DEVICES=0 timeout 100 $D --profile /tmp/g_tp1 > $R/decode_tp1.json 2> $R/decode_tp1.log; echo "tp1 rc=$? ${SECONDS}s"
python3 .gpu/gaps.py /tmp/g_tp1 > $R/gaps_tp1.json; cat $R/gaps_tp1.json
