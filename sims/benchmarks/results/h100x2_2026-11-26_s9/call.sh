# Session 9 call 9 (2 x H100 wanted): gpu_refresh.sh with 2 GPUs for the H100 collectives and tp/ep accuracy (issue 12).
nvidia-smi --query-gpu=name --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H100 || { echo "not H100: stop"; exit 0; }
source .gpu/env.sh
trap 'tar czf $OUT/refresh.tgz -C /tmp refresh' EXIT
timeout 400 bash sims/benchmarks/gpu_refresh.sh /tmp/refresh 2 > /tmp/refresh_stdout.txt 2>&1; echo "refresh rc=$?"
mkdir -p /tmp/refresh; mv /tmp/refresh_stdout.txt /tmp/refresh/; grep "==\|ok\|FAIL" /tmp/refresh/refresh_stdout.txt | head -30
for f in /tmp/refresh/*.log; do echo "--- $f"; grep -i "median\|latency" $f | tail -6 | cut -c1-200; done
