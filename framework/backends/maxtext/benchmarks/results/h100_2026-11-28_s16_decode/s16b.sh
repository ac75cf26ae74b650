# Session 16 call B (one H100): where the decode step's time goes now (decode_probe --profile, main), and whether
# XLA's exhaustive Triton tiling search finds faster decode GEMMs when given the time (session 14 stopped it at 110 s).
source .gpu/env.sh
R=$OUT/results/s16b; mkdir -p $R; trap "tar czf $OUT/s16b.tgz -C $OUT/results s16b" EXIT
cp "$0" $R/; git rev-parse HEAD > $R/commit.txt 2>/dev/null; cat .gpu/s16.commit >> $R/commit.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
show() { python3 -c "import json,sys; d=json.load(open('$1')); print({r: (round(v['ms_per_decode_step'],3), round(v['tokens_per_s']), round(v['first_call_s'],1)) for r, v in d['rows'].items()})" 2>&1 | tail -1; }
timeout 200 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --profile /tmp/decode_trace > $R/decode_profile.json 2> $R/decode_profile.log
echo "decode profile rc=$? (t=$((SECONDS-T0)))"; show $R/decode_profile.json
python3 -c "
import json; d=json.load(open('$R/decode_profile.json'))
for name, t in d.get('kernels', {}).items():
    if 'GPU' in name: print(name, round(t['total_us']), 'us', t['events'], 'events'); [print('  ', r) for r in t['top'][:30]]"
FLAGS="--xla_gpu_exhaustive_tiling_search=true"
XLA_FLAGS="$FLAGS --xla_gpu_per_fusion_autotune_cache_dir=/tmp/at" python3 -c "import jax; jax.devices()" 2>/dev/null && FLAGS="$FLAGS --xla_gpu_per_fusion_autotune_cache_dir=$R/autotune_cache"
echo "flags: $FLAGS"
XLA_FLAGS="$FLAGS" timeout $((560-(SECONDS-T0))) python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW > $R/decode_exhaustive.json 2> $R/decode_exhaustive.log
echo "decode exhaustive rc=$? (t=$((SECONDS-T0)))"; show $R/decode_exhaustive.json; ls $R/autotune_cache 2>/dev/null | wc -l
