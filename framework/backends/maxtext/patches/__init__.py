"""Patches of the maxtext backend, one topic per module (the adapter imports every submodule).

devices: XLA flags, CPU host devices, the compilation cache. See framework/core/patches.py for the rules.
"""
