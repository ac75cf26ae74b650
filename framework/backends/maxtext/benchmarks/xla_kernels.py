"""The simulator's IR nodes as the maxtext backend runs them in JAX, and a loop that times them.

`XlaKernels(hf_config, dtype)` builds the backend's own Flax Transformer with one decoder layer
(random weights) and hands out, for an IR node of the `xla` stack (sims/stacks.yaml) and the dims a
workload binds, a `Bench`: the node's computation through the backend's modules and functions on
arrays of those shapes:

    embed_tokens, lm_head        Transformer._embed; Transformer.logits (float32 logits of each row's last token)
    *_layernorm, final_norm      the residual add and the model's RMSNorm module (one fusion, both outputs kept)
    qk_norm                      the q_norm and k_norm RMSNorm modules on the per-head views
    q_proj, o_proj, *_down_proj  the layer's DenseGeneral modules
    qkv_proj, *_gate_up_proj     q_proj, k_proj and v_proj / gate_proj and up_proj: separate modules, as in the
                                 model, in one program, timed two ways and the faster kept. Where XLA's dot merger
                                 runs a group as one GEMM (decode shapes), outputs handed back concatenated fold into
                                 that GEMM's output, and separate ones add a slice copy the model's step never runs
                                 (1.2-2.0 us per GEMM at Qwen2.5-0.5B decode shapes on an H200, session 19); where it
                                 leaves them apart (large prefill shapes), the concatenation is the copy (gate_up at
                                 8 x 1,024 tokens: 273 us concatenated in session 20, 195 apart in session 19)
    rotary                       rope.apply_rope on q and k
    kv_cache_write               Attention._write of k and v into [B, KVH, S, D] buffers carried through the loop
                                 (with the Pallas decode kernel, which writes the cache itself, the node stands for
                                 the step's two small kernels that materialise the new k and v: 1.4 + 1.4 us at 128
                                 rows on an H200 in session 19's profile, this bench 2.3 us)
    attention                    prefill: Attention._packed (cuDNN flash attention on GPU in bf16, what the
                                 update and log-prob passes run); decode: decode_attention.decode_attention
                                 (the Pallas kernel the rollout runs on GPU) or Attention._masked on CPU
    *_act                        nn.silu(gate) * up, as the MLP module computes it

`time_in_loop` runs a bench many times inside one compiled `lax.fori_loop`: each repetition passes
its inputs and a running scalar through an optimization barrier and folds one element of its outputs
(behind a second barrier) into that scalar, so XLA can neither hoist, deduplicate nor shrink the
work, and repetitions run back to back without a host dispatch each. Several argument sets take
turns where one would sit in the L2 cache (each layer has its own weights). The loop's own cost
per repetition (barriers, the scalar update, loop control) is timed with an empty bench of the same
shape and subtracted.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import jax
import jax.numpy as jnp
from flax import linen as nn

from framework.backends.maxtext.models import ModelConfig, Transformer
from framework.backends.maxtext.models.decode_attention import CACHE_BLOCK, decode_attention
from framework.backends.maxtext.models.rope import apply_rope, rope_inverse_frequencies
from framework.backends.maxtext.models.transformer import Attention, RMSNorm, _dense, unstack_layers

L2_BYTES = 50 * 2**20  # H100 and H200
MAX_COPIES = 16  # argument sets unrolled in one loop body (compile time grows with it)
COPIES_MEMORY = 2e9  # bytes all argument sets of one bench may take together


@dataclass
class Bench:
    fn: Callable  # (*args, *shared) -> outputs (a pytree)
    make_args: Callable[[], tuple]  # a fresh argument set (new random arrays)
    carry: Callable[[tuple, object], tuple] | None = None  # the next repetition's args from (args, outputs)
    shared: tuple = ()  # arrays every argument set uses (an embedding table: a lookup reads only its rows)
    alternative: Bench | None = None  # the same work in another form; the timer keeps the faster of the two
    form: str = ""  # names this form where there is an alternative (recorded with the time kept)


class XlaKernels:
    def __init__(self, hf_config: Mapping, dtype: str, platform: str):
        one_layer = {**hf_config, "num_hidden_layers": 1}
        config = ModelConfig.from_hf_config(one_layer, param_dtype=dtype, dtype=dtype)
        self.config = config.for_platform("none", "auto", "auto", platform)
        self.model = Transformer(self.config)
        ids = jnp.zeros((1, 1), jnp.int32)
        init = jax.jit(lambda: nn.unbox(self.model.init(jax.random.key(0), ids, ids, jnp.ones((1, 1), bool))["params"]))
        params = init()
        self.params = unstack_layers(params)
        self.layer = self.params["layers"][0]
        self.attention_module = Attention(self.config)
        self.inv_freq = rope_inverse_frequencies(self.config)
        self._key = jax.random.key(1)

    # --- helpers --------------------------------------------------------------------------------

    def randn(self, *shape: int, dtype=None):
        self._key, key = jax.random.split(self._key)
        return jax.random.normal(key, shape, dtype or self.config.dtype)

    def heads(self, b: int, s: int, kv: bool = False):
        """Random [b, s, heads, head_dim] activations (query heads, or KV heads with kv=True)."""
        return self.randn(b, s, self.config.num_kv_heads if kv else self.config.num_heads, self.config.head_dim)

    def fresh(self, tree):
        """New random arrays of the shapes of a parameter tree (each argument set its own weights)."""
        return jax.tree.map(lambda p: 0.02 * self.randn(*p.shape, dtype=p.dtype), tree)

    def bench(self, node, dims: Mapping[str, float]) -> Bench | None:
        """The node's computation at the workload's dims; None for nodes the backend does not run."""
        b, s, kv = int(dims["batch"]), int(dims["seq_len"]), int(dims["kv_len"])
        name, kind = node.name, node.op_type
        if kind == "embedding":
            return self._embedding(b, s)
        if kind == "norm":
            return self._qk_norm(b, s) if name == "qk_norm" else self._norm(name, b, s)
        if kind == "gemm" and len(node.weights[0]) == 2:
            return self._gemm(name, b, s)
        if kind == "attention":
            return self._attention(b, s, kv)
        if name == "rotary":
            return self._rotary(b, s, kv)
        if name == "kv_cache_write":
            return self._cache_write(b, s, kv)
        if kind == "elementwise" and name.endswith("_act"):
            width = self.config.intermediate_size
            return Bench(lambda gate, up: nn.silu(gate) * up,
                         lambda: (self.randn(b, s, width), self.randn(b, s, width)))
        return None

    # --- nodes ----------------------------------------------------------------------------------

    def _embedding(self, b: int, s: int) -> Bench:
        def embed(ids, params):
            return self.model.apply({"params": params}, ids, method=Transformer._embed)

        return Bench(embed, lambda: (jax.random.randint(self._split(), (b, s), 0, self.config.vocab_size),),
                     shared=({"embed_tokens": self.params["embed_tokens"]},))

    def _norm(self, name: str, b: int, s: int) -> Bench:
        c = self.config
        module = RMSNorm(c.hidden_size, c.rms_norm_eps, "norm", c.dtype, c.param_dtype)
        weights = self.params["norm"] if name == "final_norm" else self.layer["input_layernorm"]

        def residual_norm(x, residual, params):
            total = residual + x  # the residual stream goes on to the next layer: both outputs are written
            return total, module.apply({"params": params}, total)

        return Bench(residual_norm, lambda: (self.randn(b, s, c.hidden_size), self.randn(b, s, c.hidden_size),
                                             self.fresh(weights)))

    def _qk_norm(self, b: int, s: int) -> Bench:
        c = self.config
        module = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", c.dtype, c.param_dtype)
        attn = self.layer["self_attn"]

        def qk_norm(q, k, q_params, k_params):
            return module.apply({"params": q_params}, q), module.apply({"params": k_params}, k)

        return Bench(qk_norm, lambda: (self.heads(b, s), self.heads(b, s, kv=True),
                                       self.fresh(attn["q_norm"]), self.fresh(attn["k_norm"])))

    def _gemm(self, name: str, b: int, s: int) -> Bench:
        c = self.config
        attn, mlp = self.layer["self_attn"], self.layer["mlp"]
        heads, kv = (c.num_heads, c.head_dim), (c.num_kv_heads, c.head_dim)
        if name == "lm_head":
            head = "embed_tokens" if c.tie_word_embeddings else "lm_head"
            weights = {head: self.params[head]}

            def logits(x, params):
                return self.model.apply({"params": params}, x, method=Transformer.logits)

            return Bench(logits, lambda: (self.randn(b, 1, c.hidden_size), self.fresh(weights)))
        # (modules, their params, input shape): the model's own DenseGeneral layers
        specs = {
            "qkv_proj": ([_dense(heads, ("embed", "heads", "head_dim"), c.qkv_bias, c, None)]
                         + [_dense(kv, ("embed", "kv_heads", "head_dim"), c.qkv_bias, c, None)] * 2,
                         [attn["q_proj"], attn["k_proj"], attn["v_proj"]], (c.hidden_size,)),
            "o_proj": ([_dense(c.hidden_size, ("heads", "head_dim", "embed"), c.o_bias, c, None, axis=(-2, -1))],
                       [attn["o_proj"]], heads),
        }
        mlp_in = _dense(c.intermediate_size, ("embed", "mlp"), c.mlp_bias, c, None)
        specs["gate_up_proj"] = ([mlp_in, mlp_in], [mlp["gate_proj"], mlp["up_proj"]], (c.hidden_size,))
        specs["down_proj"] = ([_dense(c.hidden_size, ("mlp", "embed"), c.mlp_bias, c, None)], [mlp["down_proj"]],
                              (c.intermediate_size,))
        key = next((k for k in specs if name == k or name.endswith("_" + k)), None)
        if key is None:
            return None
        modules, weights, in_shape = specs[key]

        def apart(x, params):
            return [m.apply({"params": p}, x).reshape(b, s, -1) for m, p in zip(modules, params)]

        def make_args():
            return self.randn(b, s, *in_shape), [self.fresh(w) for w in weights]

        if len(modules) == 1:
            return Bench(lambda x, params: apart(x, params)[0], make_args)
        return Bench(lambda x, params: jnp.concatenate(apart(x, params), axis=-1), make_args, form="one output",
                     alternative=Bench(apart, make_args, form="parts apart"))

    def _rotary(self, b: int, s: int, kv: int) -> Bench:
        positions = jnp.broadcast_to(jnp.arange(kv - s, kv, dtype=jnp.int32), (b, s))

        def rotary(q, k):
            return apply_rope(q, positions, self.inv_freq), apply_rope(k, positions, self.inv_freq)

        return Bench(rotary, lambda: (self.heads(b, s), self.heads(b, s, kv=True)))

    def cache_slots(self, kv: int) -> int:
        """Slots of a buffer holding kv tokens: whole blocks for the Pallas decode kernel, as the sampler allocates."""
        return -(-kv // CACHE_BLOCK) * CACHE_BLOCK if self.config.decode_kernel == "pallas" else kv

    def _cache_write(self, b: int, s: int, kv: int) -> Bench:
        c = self.config
        slots = self.cache_slots(kv)
        index = jnp.int32(kv - s)

        def write(keys, values, k, v):
            return (self.attention_module._write(keys, k, index), self.attention_module._write(values, v, index))

        def make_args():
            buffers = [self.randn(b, c.num_kv_heads, slots, c.head_dim) for _ in range(2)]
            return (*buffers, self.heads(b, s, kv=True), self.heads(b, s, kv=True))

        # The written buffers are the next repetition's: updated in place, as the decode loop's cache.
        return Bench(write, make_args, carry=lambda args, out: (*out, *args[2:]))

    def _attention(self, b: int, s: int, kv: int) -> Bench:
        c = self.config
        if s == kv:  # prefill: causal over the row's own tokens, packed (no cache)
            lengths = jnp.full((b,), s, jnp.int32)
            return Bench(lambda q, k, v: self.attention_module._packed(q, k, v, lengths),
                         lambda: (self.heads(b, s), self.heads(b, s, kv=True), self.heads(b, s, kv=True)))
        slots = self.cache_slots(kv)
        cache_shape = (b, c.num_kv_heads, slots, c.head_dim)
        make_args = lambda: (self.heads(b, s), self.randn(*cache_shape), self.randn(*cache_shape))  # noqa: E731
        if self.config.decode_kernel == "pallas" and s == 1:  # the kernel also writes the new token's K/V
            start, index = jnp.zeros((b,), jnp.int32), jnp.int32(kv - 1)
            return Bench(lambda q, keys, values, k, v: decode_attention(q, k, v, keys, values, start, index, None, None),
                         lambda: (*make_args(), self.heads(b, s, kv=True), self.heads(b, s, kv=True)),
                         carry=lambda args, out: (args[0], out[1], out[2], *args[3:]))  # the cache updated in place
        attend = jnp.broadcast_to(jnp.arange(slots) < kv, (b, s, slots))
        return Bench(lambda q, keys, values: self.attention_module._masked(q, keys, values, attend), make_args)

    # --- the device itself ----------------------------------------------------------------------

    def copy(self, nbytes: int) -> Bench:
        """Negation of a large array: reads and writes nbytes (the achievable memory bandwidth)."""
        elements = nbytes // jnp.dtype(self.config.dtype).itemsize
        return Bench(jnp.negative, lambda: (self.randn(elements),))

    def launch(self) -> Bench:
        """The shortest kernel: one element plus one (the per-kernel floor inside a compiled program)."""
        return Bench(lambda x: x + 1, lambda: (self.randn(1),))

    def _split(self):
        self._key, key = jax.random.split(self._key)
        return key


def _loop(bench: Bench, iterations: int, copies: int):
    """A jitted program running `bench` iterations x copies times back to back: (arg sets, shared) ->
    (a scalar, the arg sets). The arg sets are donated and handed back, so that no call copies them
    (a loop-carried buffer that the body writes, such as a KV cache, would otherwise be copied on entry)."""
    def body(_, state, shared):
        token, arg_sets = state
        next_sets = []
        for args in arg_sets:
            token, args = jax.lax.optimization_barrier((token, args))
            out = jax.lax.optimization_barrier(bench.fn(*args, *shared))
            token = token + sum(leaf.reshape(-1)[0].astype(jnp.float32) for leaf in jax.tree.leaves(out))
            next_sets.append(bench.carry(args, out) if bench.carry else args)
        return token, tuple(next_sets)

    def program(arg_sets, shared):
        return jax.lax.fori_loop(0, iterations, lambda i, state: body(i, state, shared), (jnp.float32(0), arg_sets))

    return jax.jit(program, donate_argnums=0)


def _seconds(run, arg_sets, shared, repeats: int, cpu: bool) -> tuple[float, float]:
    """(typical seconds of one call, spread) after one compiling and one warm call. On a GPU the median;
    on a shared CPU the fastest (stalls only ever add time)."""
    for _ in range(2):
        token, arg_sets = run(arg_sets, shared)
        token.block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        token, arg_sets = run(arg_sets, shared)
        token.block_until_ready()
        times.append(time.perf_counter() - start)
    typical = min(times) if cpu else statistics.median(times)
    return typical, (max(times) - min(times)) / typical


@dataclass(frozen=True)
class LoopTiming:
    time_us: float  # per repetition, the loop's own cost subtracted
    spread: float
    repetitions: int
    copies: int
    loop_overhead_us: float
    form: str = ""  # the form kept, where the bench had two
    other_us: float | None = None  # the other form's time


class LoopTimer:
    """Times benches with `_loop`; the empty bench of each (iterations, copies) shape is timed once."""

    def __init__(self, cpu: bool, repeats: int, target_s: float):
        self.cpu, self.repeats, self.target_s = cpu, repeats, target_s
        self._overhead: dict[tuple[int, int], float] = {}

    def time(self, bench: Bench, bytes_touched: float, estimate_s: float, target_s: float | None = None) -> LoopTiming:
        """Per-repetition time of `bench` (which touches `bytes_touched`, estimated at `estimate_s`): enough
        repetitions that one call runs about `target_s` (default the timer's); with an alternative form, the
        faster form's time."""
        if bench.alternative is not None:
            forms = (replace(bench, alternative=None), bench.alternative)
            first, second = (self.time(form, bytes_touched, estimate_s, target_s) for form in forms)
            kept, other = (first, second) if first.time_us <= second.time_us else (second, first)
            form = forms[0].form if kept is first else forms[1].form
            return replace(kept, form=form, other_us=other.time_us)
        first = bench.make_args()
        args_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(first))
        copies = 1
        if not self.cpu and bytes_touched > 0:  # enough sets that their total exceeds twice the L2 cache
            fits = int(COPIES_MEMORY // max(args_bytes, 1))
            copies = max(1, min(MAX_COPIES, math.ceil(2 * L2_BYTES / bytes_touched), fits))
        arg_sets = (first, *(bench.make_args() for _ in range(copies - 1)))
        wanted = max(1, round((target_s or self.target_s) / max(estimate_s, 1e-7) / copies))
        iterations = min(256, 2 ** math.ceil(math.log2(wanted)))
        seconds, spread = _seconds(_loop(bench, iterations, copies), arg_sets, bench.shared, self.repeats, self.cpu)
        overhead = self._loop_overhead(iterations, copies)
        count = iterations * copies
        per_call = max(seconds - overhead, 0.02 * seconds) / count  # noise must not make a time negative
        return LoopTiming(per_call * 1e6, spread, count, copies, overhead / count * 1e6)

    def warm_up(self, seconds: float = 1.0) -> None:
        """Keep the device busy for about `seconds` (a GPU raises its clocks under load) before timing."""
        x = jnp.ones((4096, 4096), jnp.bfloat16)
        step = jax.jit(lambda x: jax.lax.fori_loop(0, 64, lambda _, y: (y @ x) * 1e-3, x))
        step(x).block_until_ready()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            step(x).block_until_ready()

    def _loop_overhead(self, iterations: int, copies: int) -> float:
        if (iterations, copies) not in self._overhead:
            empty = Bench(lambda x: x, lambda: (jnp.zeros((1,), jnp.float32),))
            arg_sets = tuple(empty.make_args() for _ in range(copies))
            run = _loop(empty, iterations, copies)
            self._overhead[iterations, copies] = _seconds(run, arg_sets, (), self.repeats, self.cpu)[0]
        return self._overhead[iterations, copies]
