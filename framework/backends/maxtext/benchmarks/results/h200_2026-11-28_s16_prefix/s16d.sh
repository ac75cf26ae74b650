# Session 16 call D (one H200): the shared-prefix decode cache against the repeated one (wt-prefix, .gpu/prefix) at
# longer prompts (1024 and 2048 tokens, 256 new, 16 x 8), both paths alternating in one process per length.
source .gpu/env.sh
R=$OUT/results/s16d; mkdir -p $R; trap "tar czf $OUT/s16d.tgz -C $OUT/results s16d" EXIT
cp "$0" $R/; cat .gpu/s16.commit > $R/commit.txt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $R/card.txt
T0=$SECONDS
for p in 1024 2048; do
  ( cd .gpu/prefix && PYTHONPATH=/tmp/site:$PWD timeout 250 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache both --prompt-tokens $p --steps 3 > $R/prefix_ab_p$p.json 2> $R/prefix_ab_p$p.log )
  echo "prompt $p rc=$? (t=$((SECONDS-T0)))"
  python3 -c "
import json; d=json.load(open('$R/prefix_ab_p$p.json'))
for r, v in d['rows'].items(): print(r, {k: round(v[k]['ms_per_decode_step'], 3) for k in ('on', 'off')}, 'off/on', round(v['off_s/on_s'], 3))" 2>&1 | tail -3
done
