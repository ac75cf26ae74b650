"""The MLX DPO losses equal Crucible's backend-neutral definitions (framework/rl/preference.py), for every
registered loss type and label smoothing, on random log-probs (float64 numpy vs float32 MLX)."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from framework.backends.mlx.losses import DPO_LOSSES, dpo_losses  # noqa: E402
from framework.rl.preference import PREFERENCE_LOSSES, preference_loss  # noqa: E402

CASES = [("sigmoid", 0.0), ("sigmoid", 0.1), ("ipo", 0.0), ("hinge", 0.0), ("robust", 0.0), ("robust", 0.2)]


def test_every_task_loss_type_has_an_mlx_loss():
    assert set(DPO_LOSSES) == set(PREFERENCE_LOSSES)


@pytest.mark.parametrize("loss_type,label_smoothing", CASES)
def test_mlx_loss_equals_the_reference_definition(loss_type, label_smoothing):
    rng = np.random.default_rng(0)
    logps = [-rng.uniform(50, 200, 16) for _ in range(4)]
    tokens = [rng.integers(20, 120, 16).astype(np.float64) for _ in range(2)]
    expected = preference_loss(loss_type)(*logps, beta=0.1, label_smoothing=label_smoothing,
                                          chosen_tokens=tokens[0], rejected_tokens=tokens[1])
    got = dpo_losses(*(mx.array(a.astype(np.float32)) for a in [*logps, *tokens]), loss_type, 0.1, label_smoothing)
    for ours, theirs in zip(got, expected):
        np.testing.assert_allclose(np.array(ours), theirs, rtol=1e-4, atol=1e-5)
