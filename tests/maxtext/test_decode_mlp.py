"""The fused decode MLP kernels (Pallas, interpreted on CPU) against the model's math written in jnp.

Tolerances: float32 inputs 1e-5 (only the summation order differs); bfloat16 inputs 3e-2 absolute
and relative on values of order 1 (a few bf16 ulps: the kernels round where the model rounds, but
sum in f32 in their own order).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from framework.backends.maxtext.benchmarks.decode_mlp_kernels import down_residual, matmul_residual, norm_gate_up

EPS = 1e-6
TOLERANCE = {jnp.float32: 1e-5, jnp.bfloat16: 3e-2}


def weights(depth: int, width: int, features: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=1.0):
        return jnp.asarray(rng.normal(size=shape) * scale, dtype)

    return dict(scale=normal(depth, scale=0.5) + 1, gate=normal(depth, features, scale=depth ** -0.5),
                up=normal(depth, features, scale=depth ** -0.5), down=normal(features, width, scale=features ** -0.5))


def rms_norm(x, scale):
    """transformer.RMSNorm: f32 statistics, normed and scale cast to the compute dtype before the product."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + EPS)
    return scale.astype(x.dtype) * normed.astype(x.dtype)


def swiglu_reference(x, w):
    normed = rms_norm(x, w["scale"])
    return jax.nn.silu(normed @ w["gate"]) * (normed @ w["up"])


def close(actual, expected, dtype):
    tol = TOLERANCE[dtype]
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(np.asarray(actual, np.float32), np.asarray(expected, np.float32), atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("rows,block_m", [(5, 128), (128, 64)])
def test_norm_gate_up_is_rmsnorm_then_swiglu(dtype, rows, block_m):
    w = weights(128, 128, 256, dtype)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(rows, 128)) * 3, dtype)
    out = norm_gate_up(x, w["scale"], w["gate"], w["up"], EPS, block_m=block_m, block_n=64, block_k=64)
    assert out.shape == (rows, 256)
    close(out, swiglu_reference(x, w), dtype)


@pytest.mark.parametrize("variant", ["partials", "atomic"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("rows,splits", [(5, 2), (128, 4)])
def test_down_residual_adds_the_projection_to_the_residual(variant, dtype, rows, splits):
    w = weights(128, 128, 256, dtype)
    rng = np.random.default_rng(2)
    hidden = jnp.asarray(rng.normal(size=(rows, 256)), dtype)
    residual = jnp.asarray(rng.normal(size=(rows, 128)) * 4, dtype)
    out = down_residual(hidden, w["down"], residual, splits=splits, variant=variant, block_m=64, block_n=64,
                        block_k=32)
    close(out, residual + hidden @ w["down"], dtype)


@pytest.mark.parametrize("variant", ["partials", "atomic"])
def test_matmul_residual_serves_the_square_output_projection(variant):
    rng = np.random.default_rng(3)
    attended = jnp.asarray(rng.normal(size=(16, 4, 32)), jnp.float32)  # [M, heads, head_dim]
    o_proj = jnp.asarray(rng.normal(size=(4, 32, 128)) / 11, jnp.float32)  # DenseGeneral's [heads, head_dim, D]
    residual = jnp.asarray(rng.normal(size=(16, 128)), jnp.float32)
    out = matmul_residual(attended.reshape(16, 128), o_proj.reshape(128, 128), residual, splits=2,
                          variant=variant, block_n=64, block_k=32)
    close(out, residual + jnp.einsum("mhd,hdn->mn", attended, o_proj), jnp.float32)


def test_bad_variant_or_blocks_are_one_line_errors():
    x = jnp.zeros((4, 128), jnp.float32)
    with pytest.raises(ValueError, match="variant='fused'; valid: partials, atomic"):
        matmul_residual(x, jnp.zeros((128, 64)), jnp.zeros((4, 64)), variant="fused")
    with pytest.raises(ValueError, match="K per split"):
        matmul_residual(x, jnp.zeros((128, 64)), jnp.zeros((4, 64)), splits=4, block_k=64, block_n=64)


def test_the_probes_grid_fits_qwens_shapes_and_stays_small():
    from framework.backends.maxtext.benchmarks import decode_mlp_probe as probe

    small, full = probe.configs("small", probe.QWEN, False), probe.configs("full", probe.QWEN, False)
    assert len(small) == len(probe.GATE_UP_GRID["small"]) + len(probe.DOWN_GRID["small"]) - 1  # none left out
    assert len(full) == len(probe.GATE_UP_GRID["full"]) + len(probe.DOWN_GRID["full"]) - 1
    assert {d["variant"] for _, d in small} == {"partials", "atomic"} and len(small) <= 15


@pytest.mark.slow
def test_the_probe_checks_every_configuration_against_xla(capsys):
    from framework.backends.maxtext.benchmarks.decode_mlp_probe import main

    report = main(["--tiny", "--repeats", "1"])
    for rows in report["rows"].values():
        assert rows["configs"] and all("error" not in c for c in rows["configs"])
        assert max(c["max_abs_diff_all_layers"] for c in rows["configs"]) < 1e-5
        assert rows["best"]["us"] > 0 and rows["xla_us"] > 0
