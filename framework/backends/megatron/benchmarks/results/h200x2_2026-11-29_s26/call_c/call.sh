# Session 26 call C (2 x H200): where megatron's step spends the time its kernels do not fill. The recipe's steps
# (call A) were 7-10% longer than their preflight, whose kernels matched a profile within 2% (session 11). Here the
# step's host time is split into a part per micro-batch and a part per step: megatron's pretrain_step at seq 128
# (kernels too short to hide the host) at 2, 4, 8 and 16 micro-batches of 2 on one GPU, 4 and 16 per rank at dp=2,
# 8 and 16 at tp=2; then full-size steps (seq 2048) at 4 and 16 micro-batches on one GPU and 16 per rank at dp=2 and
# tp=2 (global batch 32 / 64: held out, the recipe runs 8).
source .gpu/env.sh
R=$OUT/results/s26c; mkdir -p $R; cp "$0" $R/call.sh; echo 7b36f83 > $R/commit.txt
trap "tar czf $OUT/s26c.tgz -C $OUT/results s26c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $R/card.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/megatron/*.whl && echo megatron ok
P="-m framework.backends.megatron.benchmarks.pretrain_step --layer-specs local_sdpa --no-baseline --micro-batch 2"
TR="python3 -m torch.distributed.run --nproc_per_node 2"
one() {  # one GPU: tag seq global_batch
  CUDA_VISIBLE_DEVICES=$1 timeout 120 python3 $P --seq $3 --global-batch $4 --out $R/$2.json > $R/$2.log 2>&1
  echo "$2 rc=$? ${SECONDS}s"
}
(one 0 tp1_s128_gb4 128 4; one 0 tp1_s128_gb16 128 16; one 0 tp1_s2048_gb8 2048 8) &
(one 1 tp1_s128_gb8 128 8; one 1 tp1_s128_gb32 128 32; one 1 tp1_s2048_gb32 2048 32) &
wait
for spec in "dp2 1 128 16" "dp2 1 128 64" "tp2 2 128 16" "tp2 2 128 32" "dp2 1 2048 64" "tp2 2 2048 32"; do
  set -- $spec; tag=${1}_s${3}_gb${4}
  timeout 150 $TR $P --tp $2 --seq $3 --global-batch $4 --out $R/$tag.json > $R/$tag.log 2>&1; echo "$tag rc=$? ${SECONDS}s"
done
python3 - $R <<'PY'
import json, sys, pathlib
for p in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    d = json.loads(p.read_text()); r = d["results"]["megatron_local_sdpa"]
    print(p.stem, d["layout"], "seq", d["seq"], "gb", d["global_batch"], "step_s", round(r["step_s"], 4))
PY
