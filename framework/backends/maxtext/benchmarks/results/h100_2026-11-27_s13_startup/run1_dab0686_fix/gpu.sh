# Issue 15 (helper "startup2"): time to the first finished step on ONE fresh GPU with the model's small files
# first, its weights built in a child process while the first step's programs compile, the weights read into
# host memory meanwhile and placed after the last compile (docs/grpo.md "Start-up").
# (a) cold: empty CRUCIBLE_CACHE (random-init Qwen2.5-0.5B build in the background + empty JAX cache); goal 45 s
# (b) warm: the same cache again (model dir present, JAX compilation cache filled by (a)); goal 15 s
# (c) model present, JAX cache empty: only (a)'s models/ copied into a fresh cache (a hub model already
#     downloaded, compiling afresh)
# Estimated: (a) ~45-60 s, (b) ~15-20 s, (c) ~30-40 s + installs -> about 2.5 minutes (timeouts 150+90+120 s).
# CPU check of the logic: STARTUP_CPU_CHECK=1 JAX_PLATFORMS=cpu OUT=/tmp/fake_out bash gpu.sh (the CPU recipe;
# no .gpu/env.sh, no nvidia-smi).
if [ -n "${STARTUP_CPU_CHECK:-}" ]; then
  export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false; HW=cpu
  RUN="recipe=grpo_gsm8k_cpu grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=2"
  CARD="cpu check"
else
  source .gpu/env.sh
  RUN="recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample hardware=$HW grpo.eval.every=0 grpo.checkpoint.every=0 grpo.export_hf=false progress=false grpo.steps=4"
  CARD=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)
fi
R=$OUT/results/startup2; mkdir -p $R
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
rm -rf /tmp/s2_cold /tmp/s2_models_only  # empty caches (a fresh machine has none; a rerun stays honest)
go a_cold /tmp/s2_cold 150
go b_warm /tmp/s2_cold 90
mkdir -p /tmp/s2_models_only && cp -r /tmp/s2_cold/models /tmp/s2_models_only/models
go c_models_only /tmp/s2_models_only 120
ls -la /tmp/s2_cold/models | tee -a $R/first.txt
tail -n 3 $R/*.log > $R/log_tails.txt
