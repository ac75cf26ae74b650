# Session 17 call C (2 x H200): the GRPO recipe at Qwen3-8B shapes on 2 GPUs as a user types it (update fsdp=2, the
# rollout layout picked by the preflight), steps and the preflight's prediction; 0.5B one-GPU baseline not needed.
source .gpu/env.sh
R=$OUT/results/s17c; mkdir -p $R; cp .gpu/s17c.commit $R/commit.txt; cp "$0" $R/call.sh
trap "tar czf $OUT/s17c.tgz -C $OUT/results s17c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
echo "== 8B $(date +%T)"
timeout 560 python3 -m framework.backends.maxtext.benchmarks.recipe_runs --out $R/q8b --hardware $HW --steps 5 --limit-s 540 \
  --run q8b_2gpu "model=qwen3_8b hardware.devices_per_node=2" > $R/q8b.txt 2>&1; echo rc=$?
tail -30 $R/q8b.txt | cut -c1-400
grep -n "Error\|error\|RESOURCE" $R/q8b/*.log | head -10 | cut -c1-300
