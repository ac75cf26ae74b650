"""transformers 5's deprecation notes that TRL and PEFT trigger on every run (not the user's to act on)."""

from __future__ import annotations

from framework.core.patches import PatchContext, Phase, register_patch


@register_patch("torch-quiet-library-deprecations", backend="torch", phase=Phase.SETUP,
                requires={"transformers": ">=5.20,<6", "trl": ">=1.16,<2"},
                description="hide the FutureWarning transformers raises when TRL/PEFT read model."
                            "is_gradient_checkpointing (renamed is_activation_checkpointing)")
def quiet_library_deprecations(ctx: PatchContext) -> None:
    import warnings

    warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
