"""Our DPO trainer's loss, rewards and margins equal a hand computation from the policy's and the reference's
log-probs, for every loss type of the task schema (the formulas of framework/tasks/dpo.py's DPOLoss)."""

import pytest
import torch
import torch.nn.functional as F

from tests.torch.conftest import build_trainer

BETA, SMOOTHING = 0.2, 0.1
SHORT = ["dpo.max_prompt_length=32", "dpo.max_completion_length=160", "dpo.eval.every=0", "dpo.checkpoint.every=0",
         f"dpo.beta={BETA}"]


def sequence_logps(model, batch):
    """Sum of the completion tokens' log-probs per sequence, and the completion lengths."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    logps = F.log_softmax(logits[:, :-1], -1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    mask = batch["completion_mask"][:, 1:].float()
    return (logps * mask).sum(1), batch["completion_mask"].sum(1).float()


def hand_loss(loss_type, chosen, rejected, lengths, beta, smoothing):
    delta = chosen - rejected
    if loss_type == "sigmoid":
        return -F.logsigmoid(beta * delta)
    if loss_type == "hinge":
        return torch.relu(1 - beta * delta)
    if loss_type == "ipo":  # per-token log-ratios (TRL normalises by the completion length)
        length_c, length_r = lengths
        return (chosen / length_c - rejected / length_r - 1 / (2 * beta)) ** 2
    if loss_type == "robust":  # unbiased under a share `smoothing` of flipped labels (Chowdhury et al. 2024)
        flipped_free = (1 - smoothing) * -F.logsigmoid(beta * delta) - smoothing * -F.logsigmoid(-beta * delta)
        return flipped_free / (1 - 2 * smoothing)
    raise AssertionError(loss_type)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    run = build_trainer(["recipe=dpo_torch_cpu", *SHORT], tmp_path_factory.mktemp("dpo"))
    torch.manual_seed(1)
    with torch.no_grad():  # a trained-looking adapter, so the policy differs from the reference
        for name, param in run.model.named_parameters():
            if "lora_B.default" in name:
                param.normal_(std=1.0)
    return run


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge", "robust"])
def test_dpo_loss_rewards_and_margins_match_hand_computation(lora_run, loss_type):
    trl_trainer, model = lora_run.trainer, lora_run.model.eval()
    trl_trainer.loss_types = [loss_type]
    trl_trainer.label_smoothing = SMOOTHING if loss_type == "robust" else 0.0
    batch = trl_trainer.data_collator([trl_trainer.train_dataset[i] for i in range(4)])
    trl_trainer._metrics["eval"].clear()
    with torch.no_grad():
        loss = trl_trainer.compute_loss(model, dict(batch)).item()
        policy, lengths = sequence_logps(model, batch)
        with model.disable_adapter():  # reference=base with LoRA: the adapter off
            reference, _ = sequence_logps(model, batch)
    ratios = policy - reference
    chosen, rejected = ratios.chunk(2)
    expected = hand_loss(loss_type, chosen, rejected, lengths.chunk(2), BETA, trl_trainer.label_smoothing).mean()
    logged = {k: v[-1] for k, v in trl_trainer._metrics["eval"].items()}
    close = dict(rel=1e-4, abs=1e-4)  # fp32 sums of ~200 token log-probs (~ -1000) differ in the last bits
    assert loss == pytest.approx(expected.item(), **close)
    assert logged["rewards/chosen"] == pytest.approx((BETA * chosen).mean().item(), **close)
    assert logged["rewards/rejected"] == pytest.approx((BETA * rejected).mean().item(), **close)
    assert logged["rewards/margins"] == pytest.approx((BETA * (chosen - rejected)).mean().item(), **close)
    assert logged["rewards/accuracies"] == pytest.approx((chosen > rejected).float().mean().item())
    assert abs(chosen - rejected).min() > 1e-2  # the adapter changed the policy, the completions differ


def test_dpo_config_reaches_trl(lora_run):
    args = lora_run.trainer.args
    assert (args.beta, args.max_length, args.precompute_ref_log_probs) == (BETA, 32 + 160, False)
    assert lora_run.trainer.ref_model is None  # LoRA + base: TRL disables the adapter
    lengths = [(len(r["prompt_ids"]), len(r["chosen_ids"])) for r in lora_run.trainer.train_dataset]
    assert max(p for p, _ in lengths) <= 32 and max(c for _, c in lengths) <= 160


def test_precomputed_reference_equals_the_base_model(tmp_path):
    run = build_trainer(["recipe=dpo_torch_cpu", *SHORT, "dpo.reference=precomputed", "data.train_limit=8"], tmp_path)
    rows = [run.trainer.train_dataset[i] for i in range(4)]
    batch = run.trainer.data_collator(rows)
    with torch.no_grad(), run.model.disable_adapter():
        reference, _ = sequence_logps(run.model.eval(), batch)
    precomputed = torch.tensor([r["ref_chosen_logps"] for r in rows] + [r["ref_rejected_logps"] for r in rows])
    assert torch.allclose(precomputed, reference, atol=1e-4)


def test_full_finetune_reference_is_a_frozen_copy(tmp_path):
    run = build_trainer(["recipe=dpo_torch_cpu", *SHORT, "dpo.finetune=full", "data.train_limit=8"], tmp_path)
    reference = run.trainer.ref_model
    assert reference is not None and reference is not run.base_model
    assert not any(p.requires_grad for p in reference.parameters())
    assert all(torch.equal(a, b) for a, b in zip(reference.state_dict().values(), run.base_model.state_dict().values()))
