"""The merged LoRA export loads in plain transformers with the logits of the adapter model (fp32)."""

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from framework.backends.torch.model import export_hf
from tests.torch.conftest import build_trainer


def test_merged_lora_export_has_the_adapter_models_logits(tmp_path):
    run = build_trainer(["recipe=sft_torch_cpu", "sft.eval.every=0", "sft.checkpoint.every=0",
                         "data.train_limit=8"], tmp_path / "run")
    model = run.model.eval()
    torch.manual_seed(0)
    with torch.no_grad():  # a trained adapter: B = 0 at init would make the test trivial
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(std=0.2)
    ids = torch.randint(0, model.config.vocab_size, (2, 24))
    with torch.no_grad():
        adapter_logits = model(input_ids=ids).logits

    artifacts = export_hf(model, run.tokenizer, tmp_path / "hf_export")
    assert (tmp_path / "hf_export" / "model.safetensors").is_file()
    assert (tmp_path / "hf_export" / "adapter" / "adapter_model.safetensors").is_file()
    assert artifacts["hf_adapter"].endswith("adapter")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "hf_export", dtype=torch.float32).eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        merged_logits = merged(input_ids=ids).logits
    assert (merged_logits - adapter_logits).abs().max().item() < 1e-5
    assert AutoTokenizer.from_pretrained(tmp_path / "hf_export").chat_template
