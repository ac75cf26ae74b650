"""Tokenizer, model and LoRA adapter of a torch run; the merged HF export at the end."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from framework.core.dtypes import torch_dtype
from framework.core.errors import ConfigError
from framework.tasks.common import LoRAConfig

log = logging.getLogger(__name__)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer(source: str, key: str = "model"):
    """The model's tokenizer, with a chat template (chat and preference data are rendered by it) and a pad token."""
    from transformers import AutoTokenizer

    local = Path(source)
    if local.is_dir() and not any((local / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{key}: {source} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); save the "
                          f"tokenizer into the model directory (tokenizer.save_pretrained)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(f"{key}: cannot load the tokenizer of {source}: {first}") from None
    if not tokenizer.chat_template:
        raise ConfigError(f"{key}: the tokenizer of {source} has no chat template; chat and preference data need one "
                          f"(set chat_template in its tokenizer_config.json or use an instruct model)")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(source: str, param_dtype: str, attn_implementation: str, key: str = "model"):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype(param_dtype),
                                                    attn_implementation=attn_implementation)
    except (OSError, ValueError, ImportError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        # an unknown kernel (ValueError) or one whose package is absent (ImportError, was exit 1): the key, not model
        if "attn_implementation" in first or (isinstance(error, ImportError) and "attention" in first.lower()):
            raise ConfigError(f"backend.adapter.attn_implementation: {attn_implementation!r} does not load here: "
                              f"{first}; valid: sdpa (the default) or eager, a flash kernel where its package is "
                              f"installed") from None
        if isinstance(error, ImportError):
            raise
        raise ConfigError(f"{key}: cannot load a causal LM from {source}: {first}") from None


def linear_module_names(model: torch.nn.Module) -> list[str]:
    """Short names of the model's linear layers (q_proj, ...), the LM head left out as PEFT does."""
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    output = model.get_output_embeddings()
    head = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if module is output}
    return sorted(names - head)


def lora_config(model: torch.nn.Module, lora: LoRAConfig, key: str):
    """PEFT's LoraConfig for `model` (TRL wraps the model with it); a target the model lacks is a ConfigError."""
    from peft import LoraConfig

    available = linear_module_names(model)
    if lora.target_modules == ["all-linear"]:
        targets = "all-linear"
    else:
        missing = [name for name in lora.target_modules if name not in available]
        if missing:
            raise ConfigError(f"{key}.lora.target_modules: {missing[0]!r} is not a linear module of this model; "
                              f"it has: {', '.join(available)} (or use [all-linear])")
        targets = list(lora.target_modules)
    return LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                      task_type="CAUSAL_LM")


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    reference = copy.deepcopy(model)
    reference.requires_grad_(False)
    return reference.eval()


def export_hf(model: torch.nn.Module, tokenizer, out_dir: Path) -> dict[str, str]:
    """Save the trained model as an HF directory (safetensors); a LoRA model also saves its adapter alone
    (out_dir/adapter) and is then merged into the base weights. Returns the artifact paths."""
    from peft import PeftModel

    out_dir.mkdir(parents=True, exist_ok=True)
    artifacts = {"hf_export": str(out_dir)}
    if isinstance(model, PeftModel):
        adapter_dir = out_dir / "adapter"
        model.save_pretrained(adapter_dir, safe_serialization=True)
        artifacts["hf_adapter"] = str(adapter_dir)
        model = model.merge_and_unload()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return artifacts
