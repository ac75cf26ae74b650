# Session 9 call 5 (one H100): gpu_refresh.sh's one-GPU steps on an H100 (issue 12); the rollout with other PRNGs
# and a kernel profile of the rollout with the Pallas decode kernel (issue 15).
source .gpu/env.sh
trap 'tar czf $OUT/results.tgz -C /tmp refresh results' EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
echo "== refresh $(date +%T)"
timeout 200 bash sims/benchmarks/gpu_refresh.sh /tmp/refresh 1 > /tmp/refresh_stdout.txt 2>&1; echo "refresh rc=$?"
mkdir -p /tmp/refresh; mv /tmp/refresh_stdout.txt /tmp/refresh/; grep -v "^/tmp\|^$" /tmp/refresh/refresh_stdout.txt | head -20
echo "== rng $(date +%T)"
timeout 150 python3 .gpu/rng_probe.py --hardware $HW > $R/rng_probe.json 2> $R/rng_probe.log; echo "rng rc=$?"; tail -1 $R/rng_probe.json
echo "== profile $(date +%T)"
timeout 150 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --profile /tmp/trace > $R/decode_probe_pallas.json 2> $R/decode_probe_pallas.log; echo "probe rc=$?"
python3 -c "
import json; d=json.load(open('$R/decode_probe_pallas.json')); print(d['rows'])
for p, t in d.get('kernels', {}).items():
    print(p, round(t['total_us']), t['events']); [print('  ', r) for r in t['top'][:25]]
" 2>&1 | head -40
echo "== end $(date +%T)"
