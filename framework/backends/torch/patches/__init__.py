"""Patches of the torch backend, one topic per module (the adapter's load_patches imports each; bodies
import torch and transformers themselves)."""
