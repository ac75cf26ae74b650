"""Fused Pallas (GPU Triton) kernels for the MLP block of one new token per row (decode).

A decode step at 16-128 rows is bound by the number of small kernels, not by bytes
(docs/benchmarks.md, session 16): XLA runs the MLP block as an RMSNorm, a gate+up GEMM, the SwiGLU
product, a split-K down projection and its partial sums with the residual add. Here it is two or
three kernels:

- norm_gate_up: RMSNorm of the residual rows in the prologue (the model's numerics: f32 statistics,
  normed and scale cast to the compute dtype before their product), both GEMMs over one N tile,
  silu(gate) * up in the epilogue -> [M, F].
- matmul_residual (down_residual for the MLP, also the attention's o-proj): x @ w + residual with K
  split in `splits` parts, since D=896 gives few N tiles. "partials" writes f32 [S, M, N] and a
  second kernel sums them with the residual; "atomic" adds every part into an f32 buffer that starts
  as the residual (atomics make the float order, and so the low bits, nondeterministic).

Weights keep the model's layout: kernels [in, out] (DenseGeneral), gate and up separate params.
Measured on one H100 (docs/benchmarks.md, session 17): the best of 12 settings took 50 us per layer at
128 rows against XLA's 28.6 us (24.8 against 19.6 us at 16 rows), so the model does not use these
kernels; they stay beside their probe (decode_mlp_probe.py) as the starting point of a faster one.
Triton needs power-of-two tiles and at least 16 rows per dot: M is padded to the row block
(block_m, at least 16); D and N may be any multiple of block_k / block_n.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

Array = jax.Array
DOWN_VARIANTS = ("partials", "atomic")


def _interpret() -> bool:
    return jax.default_backend() != "gpu"


def _row_block(rows: int, block_m: int) -> int:
    """The row tile: block_m, but no larger than the rows need (at least 16, Triton's smallest dot)."""
    return min(block_m, max(16, pl.next_power_of_2(rows)))


def _pad_rows(x: Array, block: int) -> Array:
    extra = -x.shape[0] % block
    return x if extra == 0 else jnp.pad(x, ((0, extra), (0, 0)))


def _check_divides(what: str, size: int, block: int) -> None:
    if size % block:
        raise ValueError(f"decode_mlp: {what}={size} is not a multiple of its block {block}")


def _norm_gate_up_kernel(x_ref, scale_ref, gate_ref, up_ref, out_ref, *, eps: float, block_k: int, dtype):
    width = x_ref.shape[1]
    steps = width // block_k

    def squares(k, total):
        xk = x_ref[:, pl.ds(k * block_k, block_k)].astype(jnp.float32)
        return total + jnp.sum(xk * xk, axis=1)

    total = jax.lax.fori_loop(0, steps, squares, jnp.zeros((x_ref.shape[0],), jnp.float32))
    rstd = jax.lax.rsqrt(total / width + eps)[:, None]

    def gemms(k, accs):
        cols = pl.ds(k * block_k, block_k)
        normed = (x_ref[:, cols].astype(jnp.float32) * rstd).astype(dtype)
        scale = scale_ref[0, cols].astype(dtype)
        # The model multiplies in `dtype`; two values of it multiply exactly in f32, so one rounding matches.
        normed = (scale.astype(jnp.float32)[None, :] * normed.astype(jnp.float32)).astype(dtype)
        gate = jnp.dot(normed, gate_ref[cols, :].astype(dtype), preferred_element_type=jnp.float32)
        up = jnp.dot(normed, up_ref[cols, :].astype(dtype), preferred_element_type=jnp.float32)
        return accs[0] + gate, accs[1] + up

    shape = (x_ref.shape[0], out_ref.shape[1])
    gate, up = jax.lax.fori_loop(0, steps, gemms, (jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)))
    gate, up = gate.astype(dtype).astype(jnp.float32), up.astype(dtype).astype(jnp.float32)
    silu = (gate * jax.nn.sigmoid(gate)).astype(dtype).astype(jnp.float32)
    out_ref[...] = (silu * up).astype(out_ref.dtype)


def norm_gate_up(x: Array, norm_weight: Array, w_gate: Array, w_up: Array, eps: float, *, dtype=None,
                 block_m: int = 128, block_n: int = 64, block_k: int = 128, num_warps: int = 4,
                 num_stages: int = 2, interpret: bool | None = None) -> Array:
    """x [M, D] (residual rows), norm_weight [D], w_gate/w_up [D, F] -> silu(gate) * up [M, F] in
    `dtype` (default x's), gate/up = RMSNorm(x) @ w."""
    rows, width = x.shape
    features = w_gate.shape[1]
    dtype = jnp.dtype(dtype or x.dtype)
    _check_divides("hidden size", width, block_k)
    _check_divides("intermediate size", features, block_n)
    bm = _row_block(rows, block_m)
    padded = _pad_rows(x, bm)
    kernel = functools.partial(_norm_gate_up_kernel, eps=eps, block_k=block_k, dtype=dtype)
    out = pl.pallas_call(
        kernel,
        grid=(padded.shape[0] // bm, features // block_n),
        in_specs=[pl.BlockSpec((bm, width), lambda i, j: (i, 0)),
                  pl.BlockSpec((1, width), lambda i, j: (0, 0)),
                  pl.BlockSpec((width, block_n), lambda i, j: (0, j)),
                  pl.BlockSpec((width, block_n), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((bm, block_n), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((padded.shape[0], features), dtype),
        compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
        interpret=_interpret() if interpret is None else interpret,
        name="norm_gate_up",
    )(padded, norm_weight.reshape(1, width), w_gate, w_up)
    return out[:rows]


def _split_product(x_ref, w_ref, *, block_k: int, dtype) -> Array:
    """f32 [BM, BN]: this program's part of K (x_ref [BM, K/S], w_ref [K/S, BN])."""
    def step(k, acc):
        cols = pl.ds(k * block_k, block_k)
        return acc + jnp.dot(x_ref[:, cols].astype(dtype), w_ref[cols, :].astype(dtype),
                             preferred_element_type=jnp.float32)

    shape = (x_ref.shape[0], w_ref.shape[1])
    return jax.lax.fori_loop(0, x_ref.shape[1] // block_k, step, jnp.zeros(shape, jnp.float32))


def _partials_kernel(x_ref, w_ref, out_ref, *, block_k: int, dtype):
    out_ref[...] = _split_product(x_ref, w_ref, block_k=block_k, dtype=dtype)


def _sum_residual_kernel(parts_ref, residual_ref, out_ref, *, dtype):
    def add(s, total):
        return total + parts_ref[s]

    total = jax.lax.fori_loop(0, parts_ref.shape[0], add, jnp.zeros(out_ref.shape, jnp.float32))
    # The model rounds the projection to `dtype` before the residual add: the same two roundings.
    out_ref[...] = (total.astype(dtype).astype(jnp.float32)
                    + residual_ref[...].astype(jnp.float32)).astype(out_ref.dtype)


def _atomic_kernel(x_ref, w_ref, _, acc_ref, *, block_k: int, dtype):
    # acc_ref starts as the residual (aliased): the projection joins it unrounded, one rounding fewer than
    # the model's (up to an ulp of `dtype` apart), and the parts' order varies run to run.
    part = _split_product(x_ref, w_ref, block_k=block_k, dtype=dtype)
    plgpu.atomic_add(acc_ref, (slice(None), slice(None)), part)


def matmul_residual(x: Array, w: Array, residual: Array, *, splits: int = 2, variant: str = "partials",
                    dtype=None, block_m: int = 128, block_n: int = 128, block_k: int = 64,
                    num_warps: int = 4, num_stages: int = 2, interpret: bool | None = None) -> Array:
    """x [M, K] @ w [K, N] + residual [M, N] -> [M, N] in `dtype` (default residual's), K split in
    `splits` parts of whole block_k tiles; variant "partials" or "atomic" (module docstring)."""
    if variant not in DOWN_VARIANTS:
        raise ValueError(f"decode_mlp: variant={variant!r}; valid: {', '.join(DOWN_VARIANTS)}")
    rows, depth = x.shape
    width = w.shape[1]
    dtype = jnp.dtype(dtype or residual.dtype)
    _check_divides("output width", width, block_n)
    _check_divides("K", depth, splits)
    _check_divides(f"K per split (K={depth}, splits={splits})", depth // splits, block_k)
    bm = _row_block(rows, block_m)
    x_pad, res_pad = _pad_rows(x, bm), _pad_rows(residual, bm)
    grid = (x_pad.shape[0] // bm, width // block_n, splits)
    part = depth // splits
    in_specs = [pl.BlockSpec((bm, part), lambda i, j, s: (i, s)),
                pl.BlockSpec((part, block_n), lambda i, j, s: (s, j))]
    params = dict(compiler_params=plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages),
                  interpret=_interpret() if interpret is None else interpret)
    if variant == "atomic":
        tile = pl.BlockSpec((bm, block_n), lambda i, j, s: (i, j))
        acc = pl.pallas_call(
            functools.partial(_atomic_kernel, block_k=block_k, dtype=dtype), grid=grid,
            in_specs=in_specs + [tile], out_specs=tile,
            out_shape=jax.ShapeDtypeStruct(res_pad.shape, jnp.float32),
            input_output_aliases={2: 0}, name="matmul_residual_atomic", **params,
        )(x_pad, w, res_pad.astype(jnp.float32))
        return acc[:rows].astype(dtype)
    parts = pl.pallas_call(
        functools.partial(_partials_kernel, block_k=block_k, dtype=dtype), grid=grid, in_specs=in_specs,
        out_specs=pl.BlockSpec((None, bm, block_n), lambda i, j, s: (s, i, j)),
        out_shape=jax.ShapeDtypeStruct((splits,) + res_pad.shape, jnp.float32),
        name="matmul_residual_partials", **params,
    )(x_pad, w)
    tile = pl.BlockSpec((bm, block_n), lambda i, j: (i, j))
    out = pl.pallas_call(
        functools.partial(_sum_residual_kernel, dtype=dtype), grid=grid[:2],
        in_specs=[pl.BlockSpec((splits, bm, block_n), lambda i, j: (0, i, j)), tile], out_specs=tile,
        out_shape=jax.ShapeDtypeStruct(res_pad.shape, dtype), name="sum_residual", **params,
    )(parts, res_pad)
    return out[:rows]


def down_residual(h: Array, w_down: Array, residual: Array, **options) -> Array:
    """The MLP's down projection with the residual add: h [M, F] @ w_down [F, D] + residual [M, D]."""
    return matmul_residual(h, w_down, residual, **options)
