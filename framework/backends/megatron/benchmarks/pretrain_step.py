"""Pretraining step throughput: megatron-core (this backend) vs a plain transformers + torch loop; JSON out.

    python -m framework.backends.megatron.benchmarks.pretrain_step --out megatron_1b.json     # one GPU
    python -m framework.backends.megatron.benchmarks.pretrain_step --tiny --out tiny.json     # CPU check
    torchrun --nproc_per_node 2 -m framework.backends.megatron.benchmarks.pretrain_step --tp 2 --out tp2.json

Both sides train a random-init model of --model's architecture (default the Llama-3.2-1B shape) on
the same random tokens: global batch --global-batch sequences of --seq tokens as micro-batches of
--micro-batch with gradient accumulation, AdamW (b 0.9/0.95, weight decay 0.1), clipping at 1.0,
fp32 master weights and bf16 compute (fp32 with --tiny on a CPU).
- megatron: GPTModel + DDP + get_megatron_optimizer + the forward-backward schedules, for each
  --layer-specs entry (local_sdpa, local; te too where Transformer Engine imports);
- transformers: AutoModelForCausalLM (attn_implementation=sdpa), torch.autocast(bf16), torch AdamW
  (fused on CUDA); one process (skipped when several ranks run).
Step time = median over --steps after --warmup steps (each step synchronised); tokens/s = global
tokens / step time; MFU from framework/backends/megatron/flops.py over the peak of --hardware (default:
the detected card's file) x ranks.
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

from framework.core.paths import load_conf
from sims.calibration.timing import wall_median_s

FULL = {"model": "llama3_2_1b", "hardware": "auto", "seq": 2048, "micro_batch": 2, "global_batch": 16,
        "warmup": 3, "steps": 10, "dtype": "bfloat16"}
TINY = {"model": "tiny_llama", "hardware": "cpu", "seq": 64, "micro_batch": 2, "global_batch": 4,
        "warmup": 1, "steps": 2, "dtype": "float32"}
PEAK_KEY = {"bfloat16": "bf16", "float32": "fp32"}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny model and shapes on a CPU (a check of the script)")
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (the rest of the world is dp)")
    parser.add_argument("--layer-specs", default="local_sdpa,local",
                        help="megatron layer specs to time, comma-separated")
    parser.add_argument("--no-baseline", action="store_true", help="skip the transformers loop")
    for name, value in FULL.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=None,
                            help=f"default {value} ({TINY[name]} with --tiny)")
    args = parser.parse_args(argv)
    for name, value in (TINY if args.tiny else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def pretrain_task(args):
    from omegaconf import OmegaConf

    from framework.core.build import build
    from framework.tasks.pretrain import PretrainTask

    node = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[4] / "conf/task/pretrain.yaml"))
    node = node["pretrain"] | {"steps": args.warmup + args.steps, "global_batch_size": args.global_batch,
                               "micro_batch_size": args.micro_batch, "seq_length": args.seq,
                               "compute_dtype": args.dtype}
    node["optimizer"] |= {"warmup_steps": 0, "schedule": "constant"}
    return build(PretrainTask, node, "pretrain")


def megatron_step_s(args, shape, layout, spec: str, device) -> float:
    step, _engine = megatron_step(args, shape, layout, spec, device)  # the engine goes with this frame
    return wall_median_s(step, args.warmup, args.steps, lambda: sync(device))


def megatron_step(args, shape, layout, spec: str, device, annotate=None):
    """One training step of this backend's engine as a callable (and the engine). `annotate(name)`, when
    given, returns a context manager put around each micro-batch's forward (name "forward") and the
    optimizer step ("optimizer"), e.g. a profiler range."""
    import contextlib

    import torch
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from framework.backends.megatron.engine import Engine
    from framework.backends.megatron.trainers.batches import masked_mean_loss

    task = pretrain_task(args)
    engine = Engine(shape, layout, task, spec, on_gpu=device.type == "cuda")
    engine.wrap()
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, shape.vocab_size, (args.micro_batch, args.seq + 1), generator=generator).to(device)
    batch = {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "position_ids": torch.arange(args.seq, device=device)
             .expand(args.micro_batch, -1), "loss_mask": torch.ones(args.micro_batch, args.seq, device=device)}
    micro_batches = args.global_batch // (args.micro_batch * layout.dp)

    annotate = annotate or (lambda name: contextlib.nullcontext())

    def forward(iterator, model):
        item = next(iterator)
        with annotate("forward"):
            output = model(item["tokens"], item["position_ids"], None, labels=item["labels"])
        return output, lambda output: masked_mean_loss(item["loss_mask"], output)

    def step():
        engine.model.zero_grad_buffer()
        engine.optimizer.zero_grad()
        get_forward_backward_func()(forward_step_func=forward, data_iterator=iter([batch] * micro_batches),
                                    model=[engine.model], num_microbatches=micro_batches, seq_length=args.seq,
                                    micro_batch_size=args.micro_batch, forward_only=False)
        with annotate("optimizer"):
            engine.optimizer.step()

    return step, engine


def transformers_step_s(args, hf_config: dict, device) -> float:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in hf_config.items() if k not in ("torch_dtype", "dtype", "architectures")}
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**fields), attn_implementation="sdpa",
                                             dtype=torch.float32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=device.type == "cuda")
    tokens = torch.randint(0, hf_config["vocab_size"], (args.micro_batch, args.seq),
                           generator=torch.Generator().manual_seed(0)).to(device)
    micro_batches = args.global_batch // args.micro_batch
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bfloat16")

    def step():
        for _ in range(micro_batches):
            with autocast:
                loss = model(input_ids=tokens, labels=tokens).loss / micro_batches
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return wall_median_s(step, args.warmup, args.steps, lambda: sync(device))  # the model goes with this frame


def sync(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize()


def release(device) -> None:
    gc.collect()
    if device.type == "cuda":
        import torch

        torch.cuda.empty_cache()


def report(seconds: float, args, shape, world: int, peak_tflops: float | None, device) -> dict:
    from framework.backends.megatron.flops import train_flops_per_token

    tokens_per_s = args.global_batch * args.seq / seconds
    row = {"step_s": seconds, "tokens_per_s": tokens_per_s, "tokens_per_s_per_device": tokens_per_s / world,
           "mfu": train_flops_per_token(shape, args.seq) * tokens_per_s / (peak_tflops * 1e12 * world)
           if peak_tflops else None}
    if device.type == "cuda":
        import torch

        row["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 1e9
        torch.cuda.reset_peak_memory_stats()
    return row


def setup(args):
    """Process group, parallel_state and device of this rank; the CPU patches when there is no GPU."""
    import torch

    from framework.backends.megatron.distributed import Layout, init_model_parallel, init_process_group
    from framework.core.distributed import detect

    env = detect()
    on_gpu = torch.cuda.is_available() and not args.tiny
    if not on_gpu:
        from framework.backends.megatron.patches import checkpoint_metadata, cpu_clip_grad, cpu_device, cpu_rng

        for patch in (cpu_device, cpu_rng, cpu_clip_grad, checkpoint_metadata):
            patch.install()
    init_process_group(env, on_gpu)
    if env.world_size % args.tp:
        raise SystemExit(f"--tp {args.tp} does not divide the {env.world_size} ranks")
    layout = Layout(tp=args.tp, pp=1, cp=1, dp=env.world_size // args.tp, shard_optimizer=False)
    init_model_parallel(layout, seed=0)
    device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    return env, layout, device


def main(argv=None) -> dict:
    import torch

    from framework.backends.megatron.adapter import quiet_megatron
    from framework.backends.megatron.distributed import shutdown
    from framework.backends.megatron.model import check_layout, decoder_shape

    args = parse_args(argv)
    quiet_megatron()
    hf_config = load_conf("model", args.model)["hf_config"]
    shape = decoder_shape(hf_config)
    env, layout, device = setup(args)
    check_layout(shape, layout.tp, layout.pp)
    if args.hardware == "auto":  # the detected card's file (h100, h200, ...): its peak rate
        from framework.core.hardware import detect

        args.hardware = detect().option
    peak = load_conf("hardware", args.hardware)["hardware"]["peak_tflops"].get(PEAK_KEY[args.dtype])
    specs = [s for s in args.layer_specs.split(",") if s]
    try:
        import transformer_engine  # noqa: F401

        specs += [] if "te" in specs else ["te"]
    except ImportError:
        pass
    results = {}
    for spec in specs:
        seconds = megatron_step_s(args, shape, layout, spec, device)
        results[f"megatron_{spec}"] = report(seconds, args, shape, env.world_size, peak, device)
        release(device)
    if env.world_size == 1 and not args.no_baseline:
        seconds = transformers_step_s(args, hf_config, device)
        results["transformers"] = report(seconds, args, shape, 1, peak, device)
        release(device)
    shutdown()
    import megatron.core
    import transformers

    record = {
        "model": args.model, "hardware": args.hardware, "device": torch.cuda.get_device_name() if device.type ==
        "cuda" else "cpu", "ranks": env.world_size, "layout": layout.as_dict(), "seq": args.seq,
        "global_batch": args.global_batch, "micro_batch": args.micro_batch, "dtype": args.dtype,
        "warmup": args.warmup, "steps": args.steps, "peak_tflops_per_device": peak,
        "versions": {"torch": torch.__version__, "megatron_core": megatron.core.__version__,
                     "transformers": transformers.__version__},
        "results": results,
    }
    if "transformers" in results:
        record["ratio_vs_transformers"] = {name: row["tokens_per_s"] / results["transformers"]["tokens_per_s"]
                                           for name, row in results.items() if name != "transformers"}
    if env.is_main:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record, indent=2))
    return record


if __name__ == "__main__":
    main()
