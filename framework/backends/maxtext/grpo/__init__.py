"""GRPO math for the JAX backend: `loss` (JAX, jittable). The advantage estimators are backend-neutral:
framework/rl/advantages.py."""
