"""The SFT loss TRL computes in our trainer equals a hand computation with completion-only masking."""

import torch
import torch.nn.functional as F

from tests.torch.conftest import build_trainer


def hand_masks(tokenizer, rows):
    """Token ids of prompt+completion and a mask of the completion's tokens, from the chat template alone."""
    sequences, masks = [], []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        assert full.startswith(prompt)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        full_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        sequences.append(full_ids)
        masks.append([0] * len(prompt_ids) + [1] * (len(full_ids) - len(prompt_ids)))
    return sequences, masks


def test_sft_loss_is_the_mean_completion_token_nll(tmp_path):
    run = build_trainer(["recipe=sft_torch_cpu", "sft.eval.every=0", "sft.checkpoint.every=0",
                         "sft.finetune=full"], tmp_path)
    trl_trainer, rows = run.trainer, run.train_rows[:3]
    batch = trl_trainer.data_collator([trl_trainer.train_dataset[i] for i in range(3)])
    model = trl_trainer.model.eval()

    sequences, masks = hand_masks(run.tokenizer, rows)
    assert [list(ids[:len(seq)]) for ids, seq in zip(batch["input_ids"].tolist(), sequences)] == sequences
    completion = run.tokenizer.decode([t for t, m in zip(sequences[0], masks[0]) if m])
    assert completion == rows[0]["completion"][0]["content"] + "<|im_end|>\n"  # the answer and its end of turn

    with torch.no_grad():
        trl_loss = trl_trainer.compute_loss(model, dict(batch)).item()
        width = max(map(len, sequences))
        ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
        attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
        mask = torch.tensor([m + [0] * (width - len(m)) for m in masks])
        logits = model(input_ids=ids, attention_mask=attention).logits.float()
        nll = -F.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        target = mask[:, 1:].bool()  # a token counts when it is a completion token (predicted from the one before)
        hand = (nll[target].sum() / target.sum()).item()
    assert abs(trl_loss - hand) < 1e-5, (trl_loss, hand)
    # the prompt's tokens are not in the loss: with every token counted, the value differs
    everything = (nll[attention[:, 1:].bool()].mean()).item()
    assert abs(everything - hand) > 1e-4
