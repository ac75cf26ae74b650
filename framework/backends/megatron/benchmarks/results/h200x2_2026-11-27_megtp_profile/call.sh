# megtp (issue 12): where megatron's tp=2 pretraining step (Llama-3.2-1B shape, seq 2048, 16 x 2048 tokens in
# micro-batches of 2, local_sdpa, bf16 + Float16Module) spends its time: torch.profiler over 3 steps after
# 3 warm-up steps, tp=2 on 2 GPUs, then tp=1 on one GPU for reference. Summaries only (no traces), < 1 MB.
# Needs 2 GPUs. Estimated 1.5-2.5 minutes (two model builds ~30-40 s each, 6 steps each, the profile parse).
source .gpu/env.sh
R=$OUT/results/megtp; mkdir -p $R
cp "$0" $R/gpu.sh 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $R/card.txt
T0=$SECONDS; el() { echo "$((SECONDS-T0)) s"; }
P="-m framework.backends.megatron.benchmarks.profile_step --spec local_sdpa --profile-steps 3 --warmup 5"
timeout 150 $TR --nproc_per_node 2 $P --tp 2 --out-dir $R/tp2 > $R/tp2.log 2>&1; echo "tp2 rc=$? $(el)"
timeout 110 python3 $P --tp 1 --out-dir $R/tp1 > $R/tp1.log 2>&1; echo "tp1 rc=$? $(el)"
python3 - <<PY 2>&1 | tee $R/digest.txt
import json, glob
for f in sorted(glob.glob('$R/tp*/rank*_summary.json')):
    d = json.load(open(f)); g = d['gpu']
    print(f.split('/results/megtp/')[-1], d['device'], 'layout', d['layout'], 'sp', d['sequence_parallel'],
          'warmup_wall_s', [round(w, 4) for w in d['warmup_wall_s']], 'step_wall_s', [round(w, 4) for w in d['step_wall_s']])
    print('  ', {k: round(v, 2) if isinstance(v, float) else v for k, v in g.items()
                 if k not in ('top_kernels', 'by_kind_ms', 'in_ranges_ms')})
    print('   by kind ms:', {k: round(v, 2) for k, v in g.get('by_kind_ms', {}).items()})
    print('   in ranges ms:', {k: round(v, 2) for k, v in g.get('in_ranges_ms', {}).items()})
    for row in g.get('top_kernels', [])[:25]:
        print('    %9.2f ms %6d  %-12s %s' % (row['total_ms'], row['count'], row['kind'], row['name'][:110]))
PY
echo "done $(el)"
