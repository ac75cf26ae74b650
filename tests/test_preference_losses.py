"""The DPO-family reference losses (framework/rl/preference.py): hand values, the registry, and TRL 1.16's
own DPOTrainer loss on the same log-probs.

TRL has no pure DPO loss function: `DPOTrainer._compute_loss(model, inputs)` runs the policy forward
first. We build a real DPOTrainer on a tiny random Qwen2 (framework/models/tiny.py, offline), pass the
reference log-probs in the inputs (precompute_ref_log_probs), take the policy's summed completion
log-probs from the same forward TRL runs, and compare TRL's loss with ours.
"""

from __future__ import annotations

import numpy as np
import pytest

from framework.core.errors import ConfigError
from framework.rl.preference import PREFERENCE_LOSSES, preference_loss

LOGPS = ([-3.0, -5.0, -2.0], [-4.0, -4.5, -6.0], [-3.5, -5.0, -2.5], [-3.8, -4.0, -5.0])


def test_sigmoid_is_dpo_and_rewards_are_beta_log_ratios():
    losses, chosen, rejected = preference_loss("sigmoid")(*LOGPS, beta=0.1)
    delta = np.array([0.5 - -0.2, 0.0 - -0.5, 0.5 - -1.0])
    np.testing.assert_allclose(losses, np.log1p(np.exp(-0.1 * delta)))
    np.testing.assert_allclose(chosen, [0.05, 0.0, 0.05]) and np.testing.assert_allclose(rejected, [-0.02, -0.05, -0.1])
    smoothed, _, _ = preference_loss("sigmoid")(*LOGPS, beta=0.1, label_smoothing=0.2)
    np.testing.assert_allclose(smoothed, 0.8 * np.log1p(np.exp(-0.1 * delta)) + 0.2 * np.log1p(np.exp(0.1 * delta)))


def test_hinge_ipo_robust_formulas():
    delta = np.array([0.7, 0.5, 1.5])
    np.testing.assert_allclose(preference_loss("hinge")(*LOGPS, beta=1.0)[0], np.maximum(0, 1 - delta))
    np.testing.assert_allclose(preference_loss("ipo")(*LOGPS, beta=0.5)[0], (delta - 1.0) ** 2)
    per_token = preference_loss("ipo")(*LOGPS, beta=0.5, chosen_tokens=[1, 2, 4], rejected_tokens=2)[0]
    np.testing.assert_allclose(per_token, (np.array([0.5, 0.0, 0.125]) - np.array([-0.1, -0.25, -0.5]) - 1.0) ** 2)
    # robust with no noise is plain DPO
    np.testing.assert_allclose(preference_loss("robust")(*LOGPS, beta=0.1)[0], preference_loss("sigmoid")(*LOGPS, beta=0.1)[0])
    with pytest.raises(ConfigError, match=r"label_smoothing: 0.5 must be in \[0, 0.5\)"):
        preference_loss("robust")(*LOGPS, beta=0.1, label_smoothing=0.5)


def test_registry_names_the_valid_losses():
    assert sorted(PREFERENCE_LOSSES) == ["hinge", "ipo", "robust", "sigmoid"]
    with pytest.raises(ConfigError, match="dpo.loss_type: unknown preference loss 'kto'; valid: hinge, ipo, robust, sigmoid"):
        preference_loss("kto")


@pytest.fixture(scope="module")
def dpo_setup(tmp_path_factory):
    torch = pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    import transformers
    import yaml

    from framework.models.tiny import resolve_model_dir
    from tests.conftest import REPO_ROOT

    model_cfg = yaml.safe_load((REPO_ROOT / "conf/model/tiny_qwen2.yaml").read_text())
    model_dir = resolve_model_dir(model_cfg, tmp_path_factory.mktemp("models"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    pairs = datasets.Dataset.from_dict({"prompt": ["What is 2 + 3?"] * 4, "chosen": ["5"] * 4, "rejected": ["6"] * 4})

    def trainer(loss_type: str, beta: float, label_smoothing: float):
        args = trl.DPOConfig(output_dir=str(tmp_path_factory.mktemp("dpo")), loss_type=[loss_type], beta=beta,
                             label_smoothing=label_smoothing, precompute_ref_log_probs=True, use_cpu=True,
                             bf16=False, report_to="none", per_device_train_batch_size=2)
        built = trl.DPOTrainer(model=model_dir, args=args, train_dataset=pairs, processing_class=tokenizer)
        built.model.eval()
        return built

    return torch, trainer


def crafted_pairs(torch, trainer, seed: int):
    """Two pairs of random token ids with padding in the completions, the policy's summed completion
    log-probs from TRL's own forward, and reference log-probs offset from them."""
    generator = torch.Generator().manual_seed(seed)
    pairs, length = 2, 10
    input_ids = torch.randint(3, trainer.model.config.vocab_size, (2 * pairs, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    completion_mask = torch.zeros_like(input_ids)
    completion_mask[:, 4:] = 1
    completion_mask[1, 7:] = 0  # a shorter chosen completion
    attention_mask[1, 7:] = 0
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "completion_mask": completion_mask}
    with torch.no_grad():
        labels = input_ids.masked_fill(completion_mask == 0, -100)
        outputs = trainer.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, use_cache=False,
                                fused_lm_head=True)
    logps = (outputs.log_probs[:, -(length - 1):] * completion_mask[:, 1:]).sum(dim=1)
    chosen, rejected = logps.chunk(2)
    offsets = torch.randn(2, pairs, generator=generator, dtype=logps.dtype)
    inputs |= {"ref_chosen_logps": chosen + offsets[0], "ref_rejected_logps": rejected + offsets[1]}
    tokens = completion_mask[:, 1:].sum(dim=1).chunk(2)
    return inputs, [t.numpy() for t in (chosen, rejected, inputs["ref_chosen_logps"], inputs["ref_rejected_logps"])], \
        [t.numpy() for t in tokens]


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,beta,label_smoothing", [("sigmoid", 0.1, 0.0), ("hinge", 0.5, 0.0),
                                                            ("ipo", 0.2, 0.0), ("robust", 0.1, 0.2)])
def test_loss_matches_trl(dpo_setup, loss_type, beta, label_smoothing):
    torch, make_trainer = dpo_setup
    trainer = make_trainer(loss_type, beta, label_smoothing)
    inputs, logps, (chosen_tokens, rejected_tokens) = crafted_pairs(torch, trainer, seed=len(loss_type))
    with torch.no_grad():
        trl_loss = trainer._compute_loss(trainer.model, inputs, return_outputs=False)
    ours, _, _ = preference_loss(loss_type)(*logps, beta=beta, label_smoothing=label_smoothing,
                                            chosen_tokens=chosen_tokens, rejected_tokens=rejected_tokens)
    np.testing.assert_allclose(float(trl_loss), ours.mean(), rtol=1e-5, atol=1e-6)
