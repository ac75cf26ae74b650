"""Same tiny model, same LoRA weights, same batch: the MLX losses and one AdamW step equal TRL/PEFT/torch's.

TRL's numbers come from its own trainers: DPOTrainer.compute_loss / SFTTrainer.compute_loss on a batch
their collators built, with a PEFT copy of the very LoRA weights the MLX model holds (B is random, so
the policy differs from the reference and the rewards are not zero).
"""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import mlx.nn as nn  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

from framework.backends.mlx import lora, model_io, optim  # noqa: E402
from framework.backends.mlx.batching import collate_chats, collate_pairs, encode_chat, encode_pair  # noqa: E402
from framework.backends.mlx.losses import dpo_batch, sequence_logps, sft_loss  # noqa: E402
from framework.data.records import RecordSpec, load_records  # noqa: E402
from framework.tasks.common import LoRAConfig, OptimizerConfig  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
LORA = LoRAConfig(rank=4, alpha=8.0, dropout=0.0, target_modules=TARGETS)
PAIRS = 4
LOSSES = [("sigmoid", 0.0), ("ipo", 0.0), ("hinge", 0.0), ("robust", 0.1)]
OPT = OptimizerConfig(learning_rate=1e-2, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01, warmup_steps=0,
                      schedule="constant", min_lr_ratio=0.0, max_grad_norm=1.0)


@pytest.fixture(scope="module")
def models(tiny_dir, rope_patch):
    """(mlx model with LoRA, its tokenizer, a loader of the torch base model, HF tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = model_io.load(tiny_dir, "float32")
    lora.apply_lora(model, LORA, "dpo.lora", seed=0)
    mx.random.seed(1)
    for module in lora.lora_modules(model):
        module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05

    def torch_base():
        return AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)

    return model, tokenizer, torch_base, AutoTokenizer.from_pretrained(tiny_dir)


def peft_config():
    from peft import LoraConfig

    return LoraConfig(r=LORA.rank, lora_alpha=LORA.alpha, lora_dropout=0.0, target_modules=TARGETS)


def copy_lora_to_peft(model, torch_model) -> None:
    params = dict(torch_model.named_parameters())
    with torch.no_grad():
        for name, value in tree_flatten(model.trainable_parameters()):
            target = params[peft_name(name)]
            target.copy_(torch.from_numpy(np.array(value).T.copy()))


def peft_name(mlx_name: str) -> str:
    """model.layers.0.self_attn.q_proj.lora_a -> base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"""
    path, kind = mlx_name.rsplit(".", 1)
    return f"base_model.model.{path}.lora_{kind[-1].upper()}.default.weight"


def peft_weights(torch_model) -> dict:
    return {name: p.detach().numpy().T for name, p in torch_model.named_parameters() if "lora_" in name}


def mlx_weights(model) -> dict:
    return {peft_name(name): np.array(value) for name, value in tree_flatten(model.trainable_parameters())}


def trl_dpo(model, torch_base, tokenizer, pairs, loss_type, label_smoothing, tmp_path):
    """TRL DPOTrainer (PEFT from peft_config, so the reference is the adapter disabled) with the MLX model's
    LoRA weights: (trainer, collated batch, loss, mean chosen reward, mean rejected reward)."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    rows = [{"prompt": p.prompt, "chosen": [{"role": "assistant", "content": p.chosen}],
             "rejected": [{"role": "assistant", "content": p.rejected}]} for p in pairs]
    args = DPOConfig(output_dir=str(tmp_path), report_to="none", beta=0.1, loss_type=[loss_type],
                     label_smoothing=label_smoothing, per_device_train_batch_size=len(pairs), max_length=None,
                     use_cpu=True, bf16=False)
    trainer = DPOTrainer(model=torch_base(), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=tokenizer, peft_config=peft_config())
    copy_lora_to_peft(model, trainer.model)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(pairs))])
    loss = trainer.compute_loss(trainer.model, batch)
    metrics = trainer._metrics["train"]
    return trainer, batch, loss, metrics["rewards/chosen"][-1], metrics["rewards/rejected"][-1]


def mlx_dpo(model, tokenizer, pairs, loss_type, label_smoothing):
    examples = [encode_pair(tokenizer, p, 10_000, 10_000) for p in pairs]
    ids, mask = (mx.array(a) for a in collate_pairs(examples, tokenizer.pad_token_id))
    with lora.adapters_disabled(model):
        ref = sequence_logps(model, ids, mask)
    values = dpo_batch(model, ids, mask, ref[:len(pairs)], ref[len(pairs):], loss_type, 0.1, label_smoothing)
    return ids, mask, values


@pytest.fixture(scope="module")
def pairs():
    return load_records(RecordSpec("preference_sample", "preference", "sample", "preference", None), "train",
                        limit=PAIRS)


def same_rows(trl_ids, mlx_ids) -> bool:
    """Token for token, padding aside (TRL pads to the longest row, MLX to a multiple of 16)."""
    ours = np.array(mlx_ids)[:, :trl_ids.shape[1]]
    return np.array_equal(ours, trl_ids.numpy()) and not np.array(mlx_ids)[:, trl_ids.shape[1]:].any()


@pytest.mark.parametrize("loss_type,label_smoothing", LOSSES)
def test_dpo_loss_and_rewards_equal_trl(models, pairs, loss_type, label_smoothing, tmp_path):
    model, tokenizer, torch_base, hf_tokenizer = models
    _, batch, trl_loss, trl_chosen, trl_rejected = trl_dpo(model, torch_base, hf_tokenizer, pairs, loss_type,
                                                           label_smoothing, tmp_path)
    ids, mask, values = mlx_dpo(model, tokenizer, pairs, loss_type, label_smoothing)
    assert same_rows(batch["input_ids"], ids) and same_rows(batch["completion_mask"], mask)
    loss_sum, count, chosen_sum, rejected_sum = (float(v) for v in values[:4])
    assert abs(trl_chosen - trl_rejected) > 1e-3  # the adapter makes policy and reference differ
    assert abs(loss_sum / count - float(trl_loss)) < 1e-5
    assert abs(chosen_sum / count - trl_chosen) < 1e-5 and abs(rejected_sum / count - trl_rejected) < 1e-5


def test_one_adamw_step_moves_the_lora_weights_like_torch(models, pairs, tmp_path):
    model, tokenizer, torch_base, hf_tokenizer = models
    before = mlx_weights(model)
    trainer, _, trl_loss, _, _ = trl_dpo(model, torch_base, hf_tokenizer, pairs, "sigmoid", 0.0, tmp_path)
    torch_model = trainer.model
    trl_loss.backward()
    lora_params = [p for n, p in torch_model.named_parameters() if "lora_" in n]
    torch.nn.utils.clip_grad_norm_(lora_params, OPT.max_grad_norm)
    torch.optim.AdamW(lora_params, lr=OPT.learning_rate, betas=(OPT.b1, OPT.b2), eps=OPT.eps,
                      weight_decay=OPT.weight_decay).step()

    def loss(*_):
        return mlx_dpo(model, tokenizer, pairs, "sigmoid", 0.0)[2][0]

    _, grads = nn.value_and_grad(model, loss)()
    update = optim.make_update(model, optim.make_optimizer(OPT, total_steps=1), OPT.max_grad_norm)
    mx.eval(update(grads, mx.array(1.0 / PAIRS)))
    after, expected = mlx_weights(model), peft_weights(torch_model)
    moved = max(np.abs(after[k] - before[k]).max() for k in after)
    assert moved > 1e-3
    assert max(np.abs(after[k] - expected[k]).max() for k in after) < 1e-4


def test_sft_loss_equals_trl_with_completion_only_loss(models, tmp_path):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    model, tokenizer, torch_base, hf_tokenizer = models
    chats = load_records(RecordSpec("chat_sample", "chat", "sample", "chat", None), "train", limit=4)
    rows = [{"prompt": c[:-1], "completion": c[-1:]} for c in chats]
    args = SFTConfig(output_dir=str(tmp_path), report_to="none", completion_only_loss=True, max_length=None,
                     per_device_train_batch_size=4, use_cpu=True, bf16=False)
    trainer = SFTTrainer(model=torch_base(), args=args, train_dataset=Dataset.from_list(rows),
                         processing_class=hf_tokenizer, peft_config=peft_config())
    copy_lora_to_peft(model, trainer.model)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    with torch.no_grad():
        trl_loss = float(trainer.compute_loss(trainer.model, batch))
    examples = [encode_chat(tokenizer, c, 10_000, assistant_only=True) for c in chats]
    ids, mask = (mx.array(a) for a in collate_chats(examples, tokenizer.pad_token_id))
    assert same_rows(batch["input_ids"], ids)
    assert same_rows((batch["labels"] != -100).long(), mask)
    total, count = sft_loss(model, ids, mask)
    assert abs(float(total) / float(count) - trl_loss) < 1e-5
