"""Our JAX GRPO loss equals TRL's GRPOTrainer loss (TRL 1.16.0) on the same log-probs.

TRL has no pure loss function: `GRPOTrainer._compute_loss(model, inputs)` runs the policy forward
and then the loss. So we build a real GRPOTrainer on a tiny random Qwen2 model saved offline, take
the per-token log-probs from TRL's own `_get_per_token_logps_and_entropies`, craft old/reference
log-probs, advantages and padding around them, call `_compute_loss`, and feed the same numbers to
`grpo_loss`. The model is in eval mode, so TRL applies no gradient-accumulation scaling.
"""

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
jax = pytest.importorskip("jax")
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from framework.backends.maxtext.grpo.loss import TRL_LOSS_TYPE_TO_NORMALIZATION, grpo_loss  # noqa: E402

# one micro-batch here, where TRL bnpo (each micro-batch over its own tokens) equals our token normalisation
ONE_MICRO_BATCH_EQUIVALENT = {**TRL_LOSS_TYPE_TO_NORMALIZATION, "bnpo": "token"}

TRL_VERSION = "1.16.0"
BATCH, PROMPT_LEN, COMPLETION_LEN, MAX_COMPLETION_LEN = 8, 3, 6, 8
CLIP_LOW, CLIP_HIGH = 0.2, 0.28


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A random-init Qwen2 model and a small byte-level BPE tokenizer, saved like a hub checkpoint."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    bpe_trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<unk>", "<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(["What is 2 + 3? <think>2 + 3 = 5</think><answer>5</answer>"] * 4, bpe_trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", pad_token="<|endoftext|>", eos_token="<|im_end|>"
    )
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    directory = tmp_path_factory.mktemp("tiny_qwen2")
    transformers.Qwen2ForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def build_trainer(model_dir, loss_type, beta, kl_correction):
    """A real GRPOTrainer; with beta > 0 it also loads its reference model from `model_dir`."""
    args = trl.GRPOConfig(
        output_dir=str(model_dir / f"out_{loss_type}_{beta}_{kl_correction}"),
        per_device_train_batch_size=BATCH,
        num_generations=2,
        max_completion_length=MAX_COMPLETION_LEN,
        loss_type=loss_type,
        beta=beta,
        epsilon=CLIP_LOW,
        epsilon_high=CLIP_HIGH,
        use_bias_correction_kl=kl_correction,
        bf16=False,
        use_cpu=True,
        report_to="none",
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    prompts = datasets.Dataset.from_dict({"prompt": ["What is 2 + 3?"] * BATCH})
    trainer = trl.GRPOTrainer(
        model=str(model_dir),
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
        args=args,
        train_dataset=prompts,
        processing_class=tokenizer,
    )
    trainer.model.eval()
    return trainer


def crafted_inputs(trainer, seed):
    """TRL-format inputs around TRL's own log-probs: padding, off-policy old log-probs, a reference."""
    generator = torch.Generator().manual_seed(seed)
    vocab_size = trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, vocab_size, (BATCH, PROMPT_LEN), generator=generator)
    completion_ids = torch.randint(3, vocab_size, (BATCH, COMPLETION_LEN), generator=generator)
    prompt_mask = torch.ones(BATCH, PROMPT_LEN, dtype=torch.long)
    completion_mask = torch.ones(BATCH, COMPLETION_LEN, dtype=torch.long)
    completion_mask[1, 4:] = 0
    completion_mask[4, 2:] = 0
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([prompt_mask, completion_mask], dim=1),
            COMPLETION_LEN,
        )
    old_logp = logp + 0.5 * torch.randn(BATCH, COMPLETION_LEN, generator=generator)
    ref_logp = logp + 0.5 * torch.randn(BATCH, COMPLETION_LEN, generator=generator)
    alternating_signs = torch.tensor([1.0, -1.0] * (BATCH // 2))  # both clip bounds get exercised
    advantages = torch.randn(BATCH, generator=generator).abs() * alternating_signs
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "ref_per_token_logps": ref_logp,
        # dapo divides by the token count of the whole generation batch, here as if 7 more tokens
        # sat in other micro-batches
        "num_items_in_batch": completion_mask.sum() + 7,
    }
    return inputs, logp


def as_jax(tensor):
    return jax.numpy.asarray(tensor.numpy(), dtype=jax.numpy.float32)


def test_trl_version_is_the_one_checked():
    assert trl.__version__ == TRL_VERSION


@pytest.mark.parametrize(
    ("beta", "kl_correction"),
    [(0.0, False), (0.04, False), (0.04, True)],  # True is TRL's default use_bias_correction_kl
)
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_loss_matches_trl(tiny_model_dir, loss_type, beta, kl_correction):
    trainer = build_trainer(tiny_model_dir, loss_type, beta, kl_correction)
    inputs, logp = crafted_inputs(trainer, seed=len(loss_type) + int(beta * 100) + kl_correction)
    with torch.no_grad():
        trl_loss = trainer._compute_loss(trainer.model, inputs).item()
    trl_metrics = {name: values[-1] for name, values in trainer._metrics["eval"].items()}

    loss, metrics = grpo_loss(
        as_jax(logp),
        as_jax(inputs["old_per_token_logps"]),
        as_jax(inputs["advantages"]),
        as_jax(inputs["completion_mask"]),
        as_jax(inputs["ref_per_token_logps"]) if beta else None,
        clip_low=CLIP_LOW,
        clip_high=CLIP_HIGH,
        beta=beta,
        kl_importance_correction=kl_correction,
        normalization=ONE_MICRO_BATCH_EQUIVALENT[loss_type],
        max_completion_length=MAX_COMPLETION_LEN,
        num_tokens_in_batch=float(inputs["num_items_in_batch"]) if loss_type == "dapo" else None,
    )

    assert float(loss) == pytest.approx(trl_loss, rel=1e-6, abs=1e-6)
    assert float(metrics["clip_fraction_low"]) == pytest.approx(trl_metrics["clip_ratio/low_mean"], abs=1e-6)
    assert float(metrics["clip_fraction_high"]) == pytest.approx(trl_metrics["clip_ratio/high_mean"], abs=1e-6)
    assert float(metrics["clip_fraction"]) == pytest.approx(trl_metrics["clip_ratio/region_mean"], abs=1e-6)
    assert trl_metrics["clip_ratio/low_mean"] > 0 and trl_metrics["clip_ratio/high_mean"] > 0  # both clips exercised
    if beta:
        assert float(metrics["kl"]) == pytest.approx(trl_metrics["kl"], rel=1e-6, abs=1e-7)
        assert trl_metrics["kl"] > 0
    else:
        assert "kl" not in trl_metrics and "kl" not in metrics
