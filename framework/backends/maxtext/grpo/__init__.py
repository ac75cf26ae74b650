"""GRPO math for the JAX backend: `advantages` (numpy, host side) and `loss` (JAX, jittable).

Import the submodules directly; this package imports nothing so that the numpy-only advantage
code can be used without loading JAX.
"""
