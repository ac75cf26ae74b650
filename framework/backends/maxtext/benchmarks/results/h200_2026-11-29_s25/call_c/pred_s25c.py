# Session 25 call C's cases predicted on the dev CPU before the call (main with the float32-master model merged).
import sys
from framework.backends.maxtext.benchmarks import logprob_probe
from framework.backends.maxtext.benchmarks.scan_kept_fit import predicted
from framework.backends.maxtext.benchmarks.shapes import parse_args

LOGPROB = [("qwen2_5_1_5b_instruct", 32, 256, 256), ("llama3_2_1b", 128, 256, 256), ("qwen3_8b", 8, 512, 512),
           ("qwen2_5_7b", 16, 256, 256)]
UPDATE = [("llama3_2_1b", 32, "full"), ("qwen2_5_0_5b_instruct", 32, "minimal")]
for model, mb, p, n in LOGPROB:
    args = parse_args("logprob", ["--model", model, "--micro-batch", str(mb), "--prompt-tokens", str(p), "--new-tokens", str(n),
                       "--hardware", "h200"], logprob_probe.EXTRA)
    pr = logprob_probe.predictions(args)
    print(f"logprob_probe {model} mb={mb} prompt={p} new={n}: " +
          ", ".join(f"{k} {v:.1f} ms" for k, v in pr.items() if k != "rows_ms"))
for model, mb, remat in UPDATE:
    s, _, _ = predicted({"model": model, "micro_batch": mb, "rows": 128, "generations": 8, "prompt_tokens": 256,
                         "new_tokens": 256, "hardware": "h200", "remat": remat})
    print(f"update_probe {model} mb={mb} remat={remat}: training phase {s * 1e3:.1f} ms")
