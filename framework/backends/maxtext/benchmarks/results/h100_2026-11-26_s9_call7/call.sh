# Session 9 call 7 (one H100): the rollout's kernel profile with each kernel's shape, op and source line.
source .gpu/env.sh
R=$OUT/results; mkdir -p $R
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 200 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --profile /tmp/trace > $R/decode_probe_sources.json 2> $R/decode_probe_sources.log; echo "probe rc=$?"
python3 -c "
import json; d=json.load(open('$R/decode_probe_sources.json')); print(d['rows'])
t=d['kernels']['/device:GPU:0']; print(round(t['total_us']), t['events'])
[print(r) for r in t['top'][:40]]
" 2>&1 | cut -c1-330
