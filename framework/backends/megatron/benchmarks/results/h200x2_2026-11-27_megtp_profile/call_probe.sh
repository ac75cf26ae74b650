source .gpu/env.sh; R=$OUT/results/megtp; mkdir -p $R
P="-m framework.backends.megatron.benchmarks.pretrain_step --layer-specs local_sdpa --no-baseline"
timeout 70 python3 $P --seq 128 --out $R/host_seq128_tp1.json > $R/host_seq128_tp1.log 2>&1; echo "tp1 rc=$?"
timeout 80 $TR --nproc_per_node 2 $P --tp 2 --seq 128 --out $R/host_seq128_tp2.json > $R/host_seq128_tp2.log 2>&1; echo "tp2 rc=$?"
timeout 80 $TR --nproc_per_node 2 $P --tp 2 --out $R/tp2_seq2048.json > $R/tp2_seq2048.log 2>&1; echo "tp2 2048 rc=$?"
grep -h '"step_s"' $R/*.json; nvidia-smi --query-gpu=name --format=csv,noheader > $R/card.txt
git log -1 --format=%H > $R/commit.txt 2>/dev/null; cp .gpu/megreq.sh $R/gpu.sh
