# Session 19 call C (one H200): the decode kernel's parts against gqa, loop-timed; then the xla calibration with the
# kernel as it now runs (parts chosen by sequence_splits).
source .gpu/env.sh
R=$OUT/results/s19c; mkdir -p $R; cp "$0" $R/call.sh
trap "tar czf $OUT/s19c.tgz -C $OUT/results s19c" EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
timeout 200 python3 -m framework.backends.maxtext.benchmarks.decode_attention_probe --budget-s 170 > $R/attention.json 2> $R/attention.log; echo "attention probe rc=$?"
python3 -c "
import json; d=json.load(open('$R/attention.json'))
for s in d['shapes']: print(s['rows'], s['live_to'], 'auto', s.get('auto_parts'), 'best', s.get('best'), {k: v.get('us', v.get('error')) for k, v in s['settings'].items()}, round(max([v.get('max_abs_diff_vs_parts_1', 0) for v in s['settings'].values()] or [0]), 4))
" || tail -20 $R/attention.log
timeout 300 python3 -m framework.backends.maxtext.benchmarks.xla_calibrate --hardware $HW --out $R/xla > $R/xla.log 2>&1; echo "calibrate rc=$?"
tail -22 $R/xla.log
