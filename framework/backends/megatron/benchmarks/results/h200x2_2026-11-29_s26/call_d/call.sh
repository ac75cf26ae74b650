# Session 26 call D (one GPU of the 2 x H200): the SM clock and power through megatron's 1-GPU step (the step's
# micro-batches run 6.5% longer than the kernels the preflight adds up, call C), sampled by nvidia-smi every 50 ms,
# and the burst / sustained time of the step's two largest GEMMs (fc1 4096 x 2048 x 16384, fc2 4096 x 8192 x 2048),
# to see whether the card's clock under its 700 W cap is what the burst-timed tables leave out.
source .gpu/env.sh
R=$OUT/results/s26d; mkdir -p $R; cp "$0" $R/call.sh; echo 7b36f83 > $R/commit.txt
trap "tar czf $OUT/s26d.tgz -C $OUT/results s26d" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv,noheader | tee $R/card.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/megatron/*.whl && echo megatron ok
export CUDA_VISIBLE_DEVICES=0
nvidia-smi -i 0 --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu,clocks_event_reasons.active --format=csv,noheader -lms 50 > $R/smi.csv &
SMI=$!
P="-m framework.backends.megatron.benchmarks.pretrain_step --layer-specs local_sdpa --no-baseline --micro-batch 2"
date '+%Y/%m/%d %H:%M:%S.%N' > $R/t_meg_start; timeout 150 python3 $P --seq 2048 --global-batch 16 --steps 20 --out $R/tp1_gb16.json > $R/tp1_gb16.log 2>&1
echo "meg rc=$? ${SECONDS}s"; date '+%Y/%m/%d %H:%M:%S.%N' > $R/t_meg_end
for s in 4096,2048,16384 4096,8192,2048; do
  date '+%Y/%m/%d %H:%M:%S.%N' > $R/t_probe_${s//,/x}
  timeout 90 python3 -m framework.backends.maxtext.benchmarks.power_probe --shape $s > $R/probe_${s//,/x}.json 2> $R/probe_${s//,/x}.log
  echo "probe $s rc=$? ${SECONDS}s"
done
kill $SMI
python3 - $R <<'PY'
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
for p in sorted(R.glob("probe_*.json")):
    try: d = json.loads(p.read_text()); print(p.stem, {k: round(v, 4) for k, v in d["ms"].items()})
    except Exception as e: print(p.stem, "unreadable", e)
print(json.loads((R / "tp1_gb16.json").read_text())["results"])
PY
wc -l $R/smi.csv
