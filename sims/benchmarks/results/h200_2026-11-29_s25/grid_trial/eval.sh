# usage: eval.sh OUTDIR  — re-predict every saved H200 torch-stack accuracy run with the shipped tables
R=sims/benchmarks/results; O=$1; mkdir -p $O
rp() { name=$1; shift; python -m sims.benchmarks.repredict --hardware conf/hardware/h200.yaml "$@" --out $O/$name > $O/$name.log 2>&1 || echo "FAIL $name"; }
rp x4 $R/h200x4_2026-11-26/accuracy_{transformers,tp1,ep1}.json
rp x1 $R/h200_2026-11-26/accuracy.json
rp x2 $R/h200x2_2026-11-26_s9/{hf/accuracy,fused_tp1/accuracy_tp1,moe_ep1/accuracy_ep1,fused_tp2/accuracy_tp2,moe_ep2/accuracy_ep2}.json
rp callB $R/h200x4_2026-11-26_s11_callB/{hf/accuracy,fused_tp1/accuracy_tp1,moe_ep1/accuracy_ep1}.json
rp callA $R/h200x4_2026-11-26_s11_callA/{fused_tp4/accuracy_tp4,moe_ep4/accuracy_ep4}.json
rp s25 $R/h200_2026-11-29_s25/{hf/accuracy,fused_tp1/accuracy_tp1,moe_ep1/accuracy_ep1}.json
