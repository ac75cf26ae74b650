"""GRPO advantages and loss against hand-computed values."""

import math

import numpy as np
import pytest

from framework.core.errors import ConfigError
from framework.rl.advantages import ADVANTAGE_ESTIMATORS, compute_advantages

jax = pytest.importorskip("jax")
jnp = jax.numpy
from framework.backends.maxtext.grpo.loss import STATIC_ARGNAMES, grpo_loss, k3_kl, reduce_tokens  # noqa: E402

# Two prompts, four completions each, grouped contiguously.
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]
SAMPLE_STD_OF_1001 = math.sqrt(1 / 3)  # mean 0.5, squared deviations 4 * 0.25, Bessel: / 3


# ---- advantages --------------------------------------------------------------------------------


def test_the_trainer_takes_each_estimator_with_the_tasks_options():
    # trainers/rollout.advantages: grpo.scale_rewards=false is Dr.GRPO's r - mean; rloo and reinforce take none
    from types import SimpleNamespace

    from framework.backends.maxtext.trainers.rollout import advantages

    def task(estimator, scale=True):
        return SimpleNamespace(advantage_estimator=estimator, scale_rewards=scale, num_generations=4)

    rewards = np.array(REWARDS, dtype=np.float32)
    np.testing.assert_allclose(advantages(rewards, task("grpo")), compute_advantages(REWARDS, 4, "grpo"))
    np.testing.assert_allclose(advantages(rewards, task("grpo", False)), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])
    for estimator in ("rloo", "reinforce"):
        expected = compute_advantages(REWARDS, 4, estimator)
        np.testing.assert_allclose(advantages(rewards, task(estimator, False)), expected)


def test_grpo_normalises_by_group_mean_and_sample_std():
    expected_first = 0.5 / (SAMPLE_STD_OF_1001 + 1e-4)
    np.testing.assert_allclose(
        compute_advantages(REWARDS, 4, "grpo"),
        [expected_first, -expected_first, -expected_first, expected_first, 0, 0, 0, 0],
        rtol=1e-6,
    )


def test_grpo_eps_bounds_ties_and_dr_grpo_skips_the_std():
    np.testing.assert_allclose(compute_advantages([2.0, 2.0], 2, "grpo", eps=0.5), [0.0, 0.0])
    np.testing.assert_allclose(
        compute_advantages(REWARDS, 4, "grpo", scale_by_std=False), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]
    )


def test_rloo_uses_the_mean_of_the_other_completions():
    # first completion: 1 - mean(0, 0, 1) = 2/3; second: 0 - mean(1, 0, 1) = -2/3
    np.testing.assert_allclose(
        compute_advantages(REWARDS, 4, "rloo"), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0], rtol=1e-6
    )
    np.testing.assert_allclose(compute_advantages([3.0, 1.0, 2.0], 3, "rloo"), [1.5, -1.5, 0.0])


def test_reinforce_batch_and_group_baselines():
    # batch mean of REWARDS is 0.75; group means are 0.5 and 1.0
    np.testing.assert_allclose(
        compute_advantages(REWARDS, 4, "reinforce"), [0.25, -0.75, -0.75, 0.25, 0.25, 0.25, 0.25, 0.25]
    )
    np.testing.assert_allclose(
        compute_advantages(REWARDS, 4, "reinforce", baseline="group"), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]
    )


def test_advantages_are_float32_and_keep_the_order():
    advantages = compute_advantages(np.arange(6, dtype=np.float64), 3, "rloo")
    assert advantages.dtype == np.float32 and advantages.shape == (6,)
    np.testing.assert_allclose(advantages, [-1.5, 0.0, 1.5, -1.5, 0.0, 1.5])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: compute_advantages(REWARDS, 4, "ppo"), ", ".join(sorted(ADVANTAGE_ESTIMATORS))),
        (lambda: compute_advantages(REWARDS, 3, "grpo"), "divisible by num_generations"),
        (lambda: compute_advantages([1.0, 2.0], 1, "grpo"), "num_generations >= 2"),
        (lambda: compute_advantages(REWARDS, 4, "rloo", scale_by_std=False), "do not apply to 'rloo'"),
        (lambda: compute_advantages(REWARDS, 4, "reinforce", baseline="median"), "valid: ['batch', 'group']"),
    ],
)
def test_advantage_config_errors(call, message):
    with pytest.raises(ConfigError) as error:
        call()
    assert message in str(error.value)


# ---- loss pieces -------------------------------------------------------------------------------


def one_token_each(ratios, advantages):
    """[N, 1] inputs whose ratio exp(logp - old_logp) is `ratios` (old_logp = 0)."""
    logp = jnp.log(jnp.array(ratios, dtype=jnp.float32))[:, None]
    return logp, jnp.zeros_like(logp), jnp.array(advantages, dtype=jnp.float32), jnp.ones_like(logp)


@pytest.mark.parametrize(
    ("ratio", "advantage", "clip_low", "clip_high", "expected"),
    [
        (1.5, 1.0, 0.2, 0.2, -1.2),  # A > 0: gains above 1 + clip_high are cut off
        (1.5, 1.0, 0.2, 0.28, -1.28),  # clip-higher: a separate upper bound
        (0.5, 1.0, 0.2, 0.2, -0.5),  # A > 0, r below the range: the unclipped (smaller) term wins
        (0.5, -1.0, 0.2, 0.2, 0.8),  # A < 0: the ratio is floored at 1 - clip_low
        (0.5, -1.0, 0.4, 0.2, 0.6),
        (1.5, -1.0, 0.2, 0.2, 1.5),  # A < 0, r above the range: unclipped, the pessimistic bound
        (1.1, 2.0, 0.2, 0.2, -2.2),  # inside the range: plain r * A
    ],
)
def test_clipped_objective_by_hand(ratio, advantage, clip_low, clip_high, expected):
    loss, _ = grpo_loss(*one_token_each([ratio], [advantage]), clip_low=clip_low, clip_high=clip_high)
    assert float(loss) == pytest.approx(expected, rel=1e-6)


def test_clip_metrics_and_ratio_stats_ignore_padding():
    logp, old_logp, advantages, mask = one_token_each([1.5, 0.5, 0.5, 1.5, 10.0], [1.0, 1.0, -1.0, -1.0, 1.0])
    mask = mask.at[4, 0].set(0.0)  # a padded token with a huge ratio must not count
    _, metrics = grpo_loss(logp, old_logp, advantages, mask)
    assert float(metrics["clip_fraction_high"]) == pytest.approx(0.25)  # r = 1.5 with A > 0
    assert float(metrics["clip_fraction_low"]) == pytest.approx(0.25)  # r = 0.5 with A < 0
    assert float(metrics["clip_fraction"]) == pytest.approx(0.5)
    assert float(metrics["ratio_mean"]) == pytest.approx(1.0)
    assert (float(metrics["ratio_min"]), float(metrics["ratio_max"])) == pytest.approx((0.5, 1.5))
    assert "kl" not in metrics


def test_k3_kl_by_hand():
    # ref/policy = 0.25/0.5 = 0.5: 0.5 - ln(0.5) - 1
    value = k3_kl(jnp.log(jnp.float32(0.5)), jnp.log(jnp.float32(0.25)))
    assert float(value) == pytest.approx(0.5 - math.log(0.5) - 1, rel=1e-6)
    assert float(k3_kl(jnp.float32(-2.0), jnp.float32(-2.0))) == 0.0
    samples = jnp.linspace(-3.0, 3.0, 13)
    assert bool(jnp.all(k3_kl(jnp.zeros_like(samples), samples) >= 0))


def test_kl_is_added_to_every_token_with_beta():
    logp = jnp.log(jnp.array([[0.5, 0.5]], dtype=jnp.float32))
    ref_logp = jnp.log(jnp.array([[0.25, 0.5]], dtype=jnp.float32))
    advantages, mask = jnp.array([1.0]), jnp.ones((1, 2))
    loss, metrics = grpo_loss(logp, logp, advantages, mask, ref_logp, beta=0.1)
    kl_first_token = 0.5 - math.log(0.5) - 1
    assert float(metrics["kl"]) == pytest.approx(kl_first_token / 2, rel=1e-6)
    assert float(metrics["policy_loss"]) == pytest.approx(-1.0)  # r = 1, A = 1 on both tokens
    assert float(loss) == pytest.approx(-1.0 + 0.1 * kl_first_token / 2, rel=1e-6)


def test_kl_importance_correction_weights_kl_by_the_ratio():
    logp = jnp.log(jnp.array([[0.5]], dtype=jnp.float32))
    old_logp = jnp.log(jnp.array([[0.4]], dtype=jnp.float32))  # r = 1.25
    ref_logp = jnp.log(jnp.array([[0.25]], dtype=jnp.float32))
    kl = 0.5 - math.log(0.5) - 1
    _, plain = grpo_loss(logp, old_logp, jnp.array([0.0]), jnp.ones((1, 1)), ref_logp, beta=0.1)
    _, corrected = grpo_loss(
        logp, old_logp, jnp.array([0.0]), jnp.ones((1, 1)), ref_logp, beta=0.1, kl_importance_correction=True
    )
    assert float(plain["kl"]) == pytest.approx(kl, rel=1e-6)
    assert float(corrected["kl"]) == pytest.approx(1.25 * kl, rel=1e-6)


def test_kl_importance_correction_changes_the_on_policy_gradient():
    # On-policy r = 1 in value, but d(r * k3)/dlogp = k3 + dk3/dlogp = k3 + 1 - exp(ref - logp).
    logp = jnp.log(jnp.array([[0.5]], dtype=jnp.float32))
    ref_logp = jnp.log(jnp.array([[0.25]], dtype=jnp.float32))
    no_advantage, mask = jnp.array([0.0]), jnp.ones((1, 1))

    def kl_gradient(correction):
        def loss(policy_logp):
            options = dict(beta=1.0, kl_importance_correction=correction)
            return grpo_loss(policy_logp, None, no_advantage, mask, ref_logp, **options)[0]

        return float(jax.grad(loss)(logp)[0, 0])

    k3 = 0.5 - math.log(0.5) - 1
    assert kl_gradient(False) == pytest.approx(1 - 0.5, rel=1e-6)
    assert kl_gradient(True) == pytest.approx(k3 + 1 - 0.5, rel=1e-6)


def test_kl_needs_a_reference():
    with pytest.raises(ConfigError, match="beta=0.04"):
        grpo_loss(*one_token_each([1.0], [1.0]), beta=0.04)


# ---- normalisations ----------------------------------------------------------------------------

# Per-token losses [[1, 2, 3], [4, pad, pad]]: with r = 1 each token's loss is -A, so A = -values.
VALUES = jnp.array([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
MASK = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("normalization", "options", "expected"),
    [
        ("token", {}, 10 / 4),  # DAPO: all real tokens weigh the same
        ("token", {"num_tokens_in_batch": 8.0}, 10 / 8),  # one micro-batch of a larger batch
        ("sequence", {}, (6 / 3 + 4 / 1) / 2),  # GRPO: mean per sequence, then over sequences
        ("fixed", {}, 10 / (2 * 3)),  # Dr.GRPO with the padded length
        ("fixed", {"max_completion_length": 5}, 10 / (2 * 5)),
    ],
)
def test_normalisations_by_hand(normalization, options, expected):
    zeros = jnp.zeros_like(VALUES)
    loss, metrics = grpo_loss(zeros, zeros, -VALUES, MASK, normalization=normalization, **options)
    assert float(loss) == pytest.approx(expected, rel=1e-6)
    assert float(metrics["policy_loss"]) == pytest.approx(expected, rel=1e-6)
    assert float(reduce_tokens(VALUES, MASK, normalization, **options)) == pytest.approx(expected, rel=1e-6)


def test_unknown_normalisation():
    with pytest.raises(ConfigError, match=r"valid: \['token', 'sequence', 'fixed'\]"):
        grpo_loss(*one_token_each([1.0], [1.0]), normalization="seq")


# ---- gradients and jit -------------------------------------------------------------------------


def test_on_policy_gradient_is_minus_advantage_over_the_normaliser():
    # old_logp=None: r = 1 with gradient dr/dlogp = 1, so d loss / d logp_t = -A * mask_t / normaliser.
    logp = jnp.array([[-1.0, -2.0, -0.5], [-0.3, -0.7, -0.1]])
    advantages = jnp.array([2.0, -1.0])
    gradient = jax.grad(lambda lp: grpo_loss(lp, None, advantages, MASK)[0])(logp)
    expected = -advantages[:, None] * MASK / 4.0
    np.testing.assert_allclose(gradient, expected, rtol=1e-6)


def test_jitted_loss_matches_eager():
    key_logp, key_old, key_ref, key_adv = jax.random.split(jax.random.key(0), 4)
    logp = -jax.random.uniform(key_logp, (4, 6), minval=0.1, maxval=3.0)
    old_logp = logp + 0.3 * jax.random.normal(key_old, (4, 6))
    ref_logp = logp + 0.3 * jax.random.normal(key_ref, (4, 6))
    advantages = jax.random.normal(key_adv, (4,))
    mask = jnp.ones((4, 6)).at[1, 4:].set(0.0).at[3, 2:].set(0.0)
    options = dict(clip_low=0.2, clip_high=0.28, beta=0.04, kl_importance_correction=True, normalization="sequence")
    eager_loss, eager_metrics = grpo_loss(logp, old_logp, advantages, mask, ref_logp, **options)
    jitted = jax.jit(grpo_loss, static_argnames=STATIC_ARGNAMES)
    jit_loss, jit_metrics = jitted(logp, old_logp, advantages, mask, ref_logp, **options)
    assert float(jit_loss) == pytest.approx(float(eager_loss), rel=1e-6)
    assert set(jit_metrics) == set(eager_metrics)
    for name in eager_metrics:
        assert float(jit_metrics[name]) == pytest.approx(float(eager_metrics[name]), rel=1e-6, abs=1e-7)
