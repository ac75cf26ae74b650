"""Where the rollout's time goes: Sampler.generate timed at two row counts, optionally with a kernel profile.

    python -m framework.backends.maxtext.benchmarks.decode_probe                # Qwen2.5-0.5B shapes, GPU
    python -m framework.backends.maxtext.benchmarks.decode_probe --profile DIR  # + GPU time per kernel
    XLA_FLAGS=--xla_gpu_enable_command_buffer= python -m ...decode_probe       # an XLA setting's effect
    python -m framework.backends.maxtext.benchmarks.decode_probe --tp 2         # tensor-parallel over 2 GPUs
    python -m framework.backends.maxtext.benchmarks.decode_probe --prefix-cache both  # shared prefix vs repeated
    python -m framework.backends.maxtext.benchmarks.decode_probe --tiny         # CPU check

Rows = prompts x generations (16 x 8 by default) and 2 x generations: if a decode step costs about
the same at both, the step is bound by per-kernel cost, not by the rows' work. `--profile` traces one
generate with jax.profiler (perfetto trace) and prints each device kernel's count, total microseconds and,
from the compiled program's HLO, its output shape, op and source line. `--prefix-cache both` times the
sampler with the prompts' K/V shared by their samples (models/prefix_cache.py; the Pallas decode path with
several samples) and repeated per sample, alternately in one process, each forced whatever
backend.adapter.shared_prefix=auto would pick (its thresholds come from this A/B); each row count then
reports both and off_s / on_s.

ms_per_decode_step is the whole generate (prefill included) over new_tokens. Each setting is also timed with
every token id an EOS (prefill_s: the same program shapes, the loop exits after the prefill's token), so
ms_per_step_after_prefill = (s - prefill_s) / (new_tokens - 1) is the decode step alone, what the simulator's
decode mode predicts (docs/simulator.md, "Where the long-prompt gap comes from").
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import re
import statistics
import time

from framework.backends.maxtext.benchmarks.grpo_step import OPTIONS, model_config, random_model
from framework.backends.maxtext.benchmarks.shapes import parse_args
from framework.core.parallel import ParallelConfig


# auto: as a run decides (backend.adapter.shared_prefix's default); on: the prompts' K/V shared by their samples
# wherever the sampler can (Pallas, n > 1); off: repeated per sample; both: on and off timed alternately.
PREFIX_CACHE = {"auto": ("auto",), "on": ("on",), "off": ("off",), "both": ("on", "off")}
PREFIX_OPTION = {"--prefix-cache": {"default": "auto", "choices": list(PREFIX_CACHE),
                                    "help": "as a run decides (auto), shared per group (on), repeated per row (off), "
                                            "or on and off both timed"}}
# --tp N: the sampler on a tensor-parallel mesh over N devices (the rest fsdp), as a rollout with parallel.rollout.tp=N
TP_OPTION = {"--tp": {"type": int, "default": 1, "help": "tensor-parallel devices (default 1: every device fsdp)"}}
_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = (.+?) (?:fusion|custom-call)\(.*?'
                          r'metadata=\{op_name="([^"]*)"(?: stack_frame_id=(\d+))?', re.M)


def hlo_sources(hlo_text: str, whole_op_name: bool = False) -> dict[str, str]:
    """{kernel name: "output shape  op_name  file:line"} for the fusions and custom calls of compiled HLO
    text: what each kernel of a profile computes, and which line of ours it came from. The op_name is its last
    part (`dot_general`), or with `whole_op_name` its whole path (`transpose(jvp(...))` marks a backward op)."""
    files = dict(re.findall(r'^(\d+) "([^"]*)"$', hlo_text.split("FunctionNames")[0], re.M))
    locations = {i: (f, line) for i, f, line in re.findall(r'^(\d+) \{file_name_id=(\d+) .*?line=(\d+)', hlo_text, re.M)}
    frames = dict(re.findall(r'^(\d+) \{file_location_id=(\d+)', hlo_text, re.M))
    sources = {}
    for name, shape, op_name, frame in _INSTRUCTION.findall(hlo_text):
        file, line = locations.get(frames.get(frame, ""), ("", ""))
        where = f"{os.path.basename(files.get(file, '?'))}:{line}" if line else ""
        op = op_name if whole_op_name else op_name.split('/')[-1]
        sources[name.replace(".", "_")] = f"{shape}  {op}  {where}".strip()
    return sources


def kernel_table(trace_dir: str, top: int = 40, sources: dict[str, str] | None = None) -> dict:
    """{process name: {total_us, events, top: [[kernel, count, us(, source)], ...]}} from the perfetto trace;
    `sources` (hlo_sources) adds what each kernel computes."""
    path = glob.glob(f"{trace_dir}/**/perfetto_trace.json.gz", recursive=True)[0]
    trace = json.load(gzip.open(path))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    tables = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0]))
    for event in events:
        if event.get("ph") == "X":
            row = tables[event["pid"]][event["name"][:90]]
            row[0] += 1
            row[1] += event.get("dur", 0.0)
    return {names.get(pid, str(pid)): {
        "total_us": sum(v[1] for v in table.values()), "events": sum(v[0] for v in table.values()),
        "top": [[name, v[0], round(v[1], 1), *([sources.get(name, "")] if sources else [])]
                for name, v in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]]}
        for pid, table in tables.items()}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__.splitlines()[0], argv, {**OPTIONS, "--profile": {"default": None, "help": "trace dir"},
                                                      **PREFIX_OPTION, **TP_OPTION})
    import jax
    import numpy as np

    from framework.backends.maxtext.sampler import Sampler, SamplingParams
    from framework.backends.maxtext.sharding import build_mesh

    config = model_config(args)
    mesh = build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=args.tp, pp=1, ep=1, cp=1))
    model, _, _, params = random_model(config, mesh)
    # An EOS id the model cannot emit: every row decodes exactly new_tokens.
    def make_sampler(name: str, eos: list[int]) -> Sampler:
        return Sampler(model.clone(config=config.replace(shared_prefix=name)), eos_token_ids=eos, pad_token_id=0,
                       prompt_bucket=args.prompt_tokens)

    samplers = {name: make_sampler(name, [config.vocab_size]) for name in PREFIX_CACHE[args.prefix_cache]}
    # Every id an EOS: the first token (the prefill's) ends every row, the decode loop does not run.
    prefill_only = {name: make_sampler(name, list(range(config.vocab_size))) for name in samplers}
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, num_samples=args.generations)
    report = {"device": jax.devices()[0].device_kind, "mesh": dict(mesh.shape), "xla_flags": os.environ.get("XLA_FLAGS", ""),
              "rows": {}}
    for prompts in dict.fromkeys((args.prompts, 2)):
        ids = np.random.default_rng(0).integers(1, config.vocab_size, (prompts, args.prompt_tokens)).tolist()
        runs = {(name, kind): sampler for kind, group in (("all", samplers), ("prefill", prefill_only))
                for name, sampler in group.items()}
        times = {key: [] for key in runs}
        for seed in range(1 + args.steps):  # the first call compiles
            for key, sampler in runs.items():  # alternated, so that drift slows all alike
                started = time.perf_counter()
                jax.block_until_ready(sampler.generate(params, ids, jax.random.key(seed), sampling))
                times[key].append(time.perf_counter() - started)
        rows = prompts * args.generations
        figures = {name: _figures(times[name, "all"], times[name, "prefill"], rows, args.new_tokens)
                   for name in samplers}
        report["rows"][rows] = figures[args.prefix_cache] if len(figures) == 1 else {
            **figures, "off_s/on_s": figures["off"]["s"] / figures["on"]["s"]}
    if args.profile:
        ids = np.random.default_rng(0).integers(1, config.vocab_size, (args.prompts, args.prompt_tokens)).tolist()
        sampler = next(iter(samplers.values()))  # with both: the shared prefix
        with jax.profiler.trace(args.profile, create_perfetto_trace=True):
            jax.block_until_ready(sampler.generate(params, ids, jax.random.key(99), sampling))
        hlo = sampler.lower(params, ids, jax.random.key(99), sampling).compile().as_text()
        report["kernels"] = kernel_table(args.profile, sources=hlo_sources(hlo))
    print(json.dumps(report, indent=1))
    return report


def _figures(times: list[float], prefill_times: list[float], rows: int, new_tokens: int) -> dict:
    seconds, prefill_s = statistics.median(times[1:]), statistics.median(prefill_times[1:])
    return {"first_call_s": times[0], "s": seconds, "tokens_per_s": rows * new_tokens / seconds,
            "ms_per_decode_step": 1e3 * seconds / new_tokens, "prefill_s": prefill_s,
            "ms_per_step_after_prefill": 1e3 * (seconds - prefill_s) / max(new_tokens - 1, 1)}


if __name__ == "__main__":
    main()
