"""The xla calibration's held-out whole steps (benchmarks/xla_calibrate.py): the backend's whole Transformer,
a prefill without a cache (plus last-token logits) and one decode step, timed in the calibration's loop and
predicted with the built-in factors and with the fitted table; each model's first prefill also with its
layers unrolled, and the scanned program's HLO kept (the scan's own cost)."""

from __future__ import annotations

from pathlib import Path

from sims import simulate

STACK = "xla"


def whole_steps(name: str, hf_config: dict, cases, plan: dict, hardware: dict, timer, platform_name: str,
                log, out: Path) -> list[dict]:
    """The backend's whole Transformer: prefill (no cache, last-token logits) and one decode step. The
    compiled program of the first prefill goes to out/hlo/ (what the scanned layers run, kernel by kernel)."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from framework.backends.maxtext.benchmarks.xla_kernels import Bench
    from framework.backends.maxtext.models import ModelConfig, Transformer
    from framework.backends.maxtext.models.decode_attention import cache_slots
    from framework.backends.maxtext.models.kv_cache import KVCache
    from framework.backends.maxtext.models.transformer import unstack_layers

    config = ModelConfig.from_hf_config(hf_config, param_dtype=plan["dtype"], dtype=plan["dtype"])
    config = config.for_platform("none", "auto", "auto", platform_name)
    model = Transformer(config)
    ids = jnp.zeros((1, 1), jnp.int32)
    params = jax.jit(lambda: nn.unbox(model.init(jax.random.key(0), ids, ids, jnp.ones((1, 1), bool))["params"]))()
    weight_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    dtype = "bf16" if plan["dtype"] == "bfloat16" else "fp32"
    results = []

    def run(workload: dict, bench, unrolled: bool = False) -> None:
        as_run = sim_workload(workload, dtype, "unrolled_prefill" if unrolled else "model")
        estimate = simulate(hf_config, hardware, {"tp": 1}, as_run, stack=STACK).latency_s
        label = _case_label(workload) + (" unrolled" if unrolled else "")
        try:  # ten times the kernels' target: the whole program's dispatch is then a small share of a call
            timing = timer.time(bench, weight_bytes, estimate, target_s=10 * plan["target_s"])
        except Exception as error:  # noqa: BLE001 - report the case, keep the others
            log(f"{name} {label:<28} FAILED: {type(error).__name__}: {str(error)[:300]}")
            return
        results.append({"kind": "unrolled_prefill" if unrolled else "model", "name": f"{name} {label}",
                        "workload": workload, "time_us": timing.time_us, "spread": timing.spread,
                        "timing": "xla_fori_loop", "repetitions": timing.repetitions, "held_out": not unrolled})
        log(f"{name} {label:<28} {timing.time_us:10.1f} us (whole model{'' if unrolled else ', held out'})")

    for workload in cases:
        batch = workload["batch"]
        if workload["mode"] == "prefill":
            tokens = jax.random.randint(jax.random.key(2), (batch, workload["seq_len"]), 0, config.vocab_size)
            mask = jnp.ones(tokens.shape, bool)
            scanned, unrolled = prefill_programs(model, config)
            first = not any(r["workload"]["mode"] == "prefill" for r in results)
            # The loop takes its arguments over (donated): each run gets its own copies.
            run(workload, Bench(scanned, lambda: jax.tree.map(jnp.copy, (tokens, mask, params))))
            if first:  # the model's first prefill: where its time goes
                hlo = out / "hlo" / f"{name}_{_case_label(workload).replace(' ', '_').replace('=', '')}.txt"
                save_hlo(scanned, (tokens, mask, params), hlo, log)
                # The same layers unrolled (each layer's weights their own arrays): the scan's own cost.
                layered = unstack_layers(params)
                run(workload, Bench(unrolled, lambda: jax.tree.map(jnp.copy, (tokens, mask, layered))), unrolled=True)
            continue
        kv = workload["context_len"]
        slots = cache_slots(kv, 0, config.decode_kernel)
        cache = KVCache.create(config, batch, slots)
        cache = cache.replace(valid=jnp.broadcast_to(jnp.arange(slots) < kv - 1, (batch, slots)),
                              index=jnp.int32(kv - 1))
        token = jnp.ones((batch, 1), jnp.int32)
        position = jnp.full((batch, 1), kv - 1, jnp.int32)
        layered = jax.tree.map(jnp.copy, unstack_layers(params))  # its own copy: the loop takes it over

        def decode_fn(token, cache, params):
            return model.apply({"params": params}, token, position, jnp.ones(token.shape, bool), cache)

        # The written cache is the next repetition's (in place), rewound to the same slot and mask.
        def rewind(args, out):
            return args[0], out[1].replace(index=args[1].index, valid=args[1].valid), args[2]

        run(workload, Bench(decode_fn, lambda: (token, cache, layered), carry=rewind))
    return results


def prefill_programs(model, config):
    """(scanned, unrolled): the prefill as the backend runs it (Transformer.hidden_states without a cache:
    one scan over the stacked layers, then the last token's logits), and the same layers called one by
    one on unstacked weights (no scan; the rows' rotation to packed form left out, all rows are full)."""
    import jax.numpy as jnp

    from framework.backends.maxtext.models import Transformer
    from framework.backends.maxtext.models.rope import positions_from_mask
    from framework.backends.maxtext.models.transformer import DecoderLayer

    def scanned(tokens, mask, params):
        hidden, _ = model.apply({"params": params}, tokens, positions_from_mask(mask), mask,
                                method=Transformer.hidden_states)
        return model.apply({"params": params}, hidden[:, -1:], method=Transformer.logits)

    layer = DecoderLayer(config, None, None, parent=None)

    def unrolled(tokens, mask, params):
        x = model.apply({"params": params}, tokens, method=Transformer._embed)
        positions, lengths = positions_from_mask(mask), mask.sum(axis=1, dtype=jnp.int32)
        for layer_params in params["layers"]:
            x, _ = layer.apply({"params": layer_params}, x, positions, lengths, None, None)
        hidden = model.apply({"params": params}, x, method=lambda m, x: m.norm(x))
        return model.apply({"params": params}, hidden[:, -1:], method=Transformer.logits)

    return scanned, unrolled


def save_hlo(fn, args, path: Path, log) -> None:
    """The optimized HLO of jit(fn) at the shapes of args, and a log line with the large dynamic slices
    in it (a scan over stacked weights slices each layer's weights: copied, unless fused into a GEMM)."""
    import jax

    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), args)
    try:
        text = jax.jit(fn).lower(*shapes).compile().as_text()
    except Exception as error:  # noqa: BLE001 - a diagnostic must not lose the run
        log(f"{path.name}: no HLO ({type(error).__name__}: {str(error)[:200]})")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    slices = [_shape_bytes(line) for line in text.splitlines() if " dynamic-slice(" in line]
    large = [b for b in slices if b >= 2**20]
    log(f"{path.name}: {len(slices)} dynamic slices, {len(large)} of 1 MiB or more ({sum(large) / 2**20:.1f} MiB)")


def _shape_bytes(line: str) -> int:
    """Bytes of an HLO instruction's output, `%x = bf16[896,9728]{1,0} op(...)` -> 17432576."""
    import math
    import re

    match = re.search(r"= (\w+)\[([\d,]*)\]", line)
    if not match:
        return 0
    width = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "pred": 1, "u32": 4, "s8": 1, "u8": 1}.get(match[1], 4)
    return width * math.prod(int(d) for d in match[2].split(",") if d)


def _case_label(workload: dict) -> str:
    if workload["mode"] == "decode":
        return f"decode b={workload['batch']} ctx={workload['context_len']}"
    return f"prefill b={workload['batch']} s={workload['seq_len']}"


def sim_workload(workload: dict, dtype: str, kind: str) -> dict:
    """The simulator's workload of a timed case: the held-out prefill (kind "model") is the backend's scanned pass
    (sims/scan_forward.py), its unrolled twin and the decode steps are not."""
    scanned = kind == "model" and workload["mode"] == "prefill"
    return {**workload, "dtype": dtype, **({"scanned": True} if scanned else {})}


def predict(cases: list[dict], models: dict, hardware: dict, table: str, dtype: str) -> None:
    """Each case's prediction with the built-in factors and with `table`; errors are (pred - meas) / meas."""
    for label, setting in (("default", None), ("calibrated", table)):
        hw = {**hardware, "efficiency_table": setting}
        for case in cases:
            result = simulate(models[case["model"]], hw, {"tp": 1}, sim_workload(case["workload"], dtype, case["kind"]),
                              stack=STACK)
            if result.status != "ok":
                raise SystemExit(f"the simulator cannot model {case['name']}: {result.reason}")
            case[f"predicted_{label}_us"] = result.latency_s * 1e6
            case[f"error_{label}"] = (result.latency_s * 1e6 - case["time_us"]) / case["time_us"]


def scan_lines(cases: list[dict], unrolled: list[dict]) -> str:
    """Markdown: each unrolled prefill against the held-out (scanned) one of the same model and shape."""
    lines = ["", "| prefill | scanned (us) | unrolled (us) | scan's share |", "|---|---|---|---|"]
    for run in unrolled:
        scanned = next(c for c in cases if c["model"] == run["model"] and c["workload"] == run["workload"])
        share = (scanned["time_us"] - run["time_us"]) / scanned["time_us"]
        lines.append(f"| {scanned['name']} | {scanned['time_us']:.1f} | {run['time_us']:.1f} | {share:+.1%} |")
    return "\n".join(lines) + "\n" if unrolled else ""
