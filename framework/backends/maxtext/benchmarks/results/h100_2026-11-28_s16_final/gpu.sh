# Session 16, main after the merges, ONE fresh H100: (a) the recipe cold (empty caches, first command on the machine),
# (b) warm, then TRL GRPOTrainer alone and ours alone (same-call ratio). ~5 min.
if [ -n "${STARTUP_CPU_CHECK:-}" ]; then
  export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false; HW=cpu
  RUN="recipe=grpo_gsm8k_cpu grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"
  CARD="cpu check"
else
  source .gpu/env.sh
  RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=4"
  CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)
fi
R=$OUT/results/final16; mkdir -p $R; cp .gpu/final16.commit $R/commit.txt; trap "tar czf $OUT/final16.tgz -C $OUT/results final16" EXIT
cp "$0" $R/gpu.sh 2>/dev/null
echo "$CARD" | tee $R/card.txt
nproc | tee -a $R/card.txt

report() {  # $1 = name: startup phases, the start-up timeline (seconds since init began), aot, steps
python3 - "$R/$1" "$1" <<'EOF' 2>&1 | tee -a $R/first.txt
import json, sys
run, name = sys.argv[1], sys.argv[2]
s = json.load(open(f"{run}/summary.json"))
if not s.get("success"):
    print(name, "FAILED:", s.get("result", {}).get("error"))
phases = {k: round(v, 2) for k, v in (s.get("startup_s") or {}).items() if v is not None}
m = s["result"]["metrics"]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
steps = [r for r in rows if "step_time_s" in r]
first = sum(phases.values()) + (steps[0]["step_time_s"] if steps else 0)
print(name, "startup_s", phases, "| step 1", round(steps[0]["step_time_s"], 2) if steps else None,
      "| FIRST STEP ENDS", round(first, 1), "s after launch")
keys = [k for k in m if k.startswith(("startup_", "model_", "aot_"))] + ["init_compile_time_s", "measured_step_s"]
print(name, "timeline", {k: (round(m[k], 2) if isinstance(m.get(k), float) else m.get(k)) for k in keys})
print(name, "steps (step, step_time_s, compile_time_s, rollout_time_s, update_time_s)",
      [(r["step"], round(r["step_time_s"], 3), round(r.get("compile_time_s", -1), 2), round(r["rollout_time_s"], 3),
        round(r["update_time_s"], 3)) for r in steps])
EOF
grep -n "aot:\|startup\|error\|Error\|RESOURCE_EXHAUSTED" $R/$1.log | cut -c1-240 | head -20 | tee -a $R/first.txt
rm -rf $R/$1/checkpoints
}
go() {  # $1 = name, $2 = cache dir, $3 = timeout, rest = overrides
name=$1; cache=$2; limit=$3; shift 3
s=$(date +%s.%N)
CRUCIBLE_CACHE=$cache timeout $limit python3 run.py $RUN "$@" hydra.run.dir=$R/$name > $R/$name.log 2>&1
echo "$name rc=$? wall=$(python3 -c "import time;print(round(time.time()-$s,1))") s (launch to exit)" | tee -a $R/first.txt
report $name
}
rm -rf /tmp/s2_cold  # empty caches: the first command on a fresh machine
go a_cold /tmp/s2_cold 150
go b_warm /tmp/s2_cold 90
echo "== trl $(date +%T)"
timeout 200 python3 -m framework.backends.maxtext.benchmarks.trl_grpo_step --hardware $HW > $R/trl.json 2> $R/trl.log; echo rc=$?
echo "== ours $(date +%T)"
timeout 120 python3 -m framework.backends.maxtext.benchmarks.grpo_step --hardware $HW --micro-batch 128 --remat minimal > $R/ours.json 2> $R/ours.log; echo rc=$?
python3 - <<PY | tee -a $R/first.txt
import json
def last_json(path):
    text = open(path).read(); i = text.rfind('\n{') + 1
    return json.loads(text[i:])
d = {}
for f in ('trl', 'ours'):
    try: d[f] = last_json('$R/' + f + '.json'); print(f, {k: d[f].get(k) for k in ('device','micro_batch','remat','step_s','rollout_s','update_s','rollout_tokens_per_s','update_mfu')})
    except Exception as e: print(f, 'no json', e)
if len(d) == 2: print('ours vs TRL: %.2fx' % (d['trl']['step_s'] / d['ours']['step_s']))
PY
tail -n 3 $R/*.log > $R/log_tails.txt
echo "== prefix on/off, 2048-token prompts $(date +%T)"
timeout 150 python3 -m framework.backends.maxtext.benchmarks.decode_probe --hardware $HW --prefix-cache both --prompt-tokens 2048 --steps 3 > $R/prefix_p2048.json 2> $R/prefix_p2048.log; echo rc=$?
python3 -c "
import json; d=json.load(open('$R/prefix_p2048.json'))
for r, v in d['rows'].items(): print(r, {k: round(v[k]['ms_per_decode_step'], 3) for k in ('on', 'off')}, 'off/on', round(v['off_s/on_s'], 3))" 2>&1 | tail -3 | tee -a $R/first.txt
