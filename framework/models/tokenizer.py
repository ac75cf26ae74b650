"""A model directory's tokenizer for the maxtext backend, without importing transformers where that gives the same
tokenizer.

`DirectTokenizer` (framework/models/direct_tokenizer.py) rebuilds, from tokenizer.json and tokenizer_config.json
with `tokenizers` and jinja2, what `<tokenizer_class>.from_pretrained` returns for the classes it covers: importing
transformers (0.5 s on the dev CPU, most of a GRPO run's 4.7 s tokenizer wait on an H100 host) is then skipped.
Whatever `direct_tokenizer.refusal` names goes through transformers as before: the class tokenizer_config.json
names for the generic and Qwen2 classes (torch is not imported), AutoTokenizer for any other (it overrides some
names: a LlamaTokenizerFast over a byte-level tokenizer.json loads as the generic backend).

One known difference from AutoTokenizer (the torch backend's loader), older than DirectTokenizer: a directory
whose tokenizer_config.json names a generic class (TokenizersBackend, PreTrainedTokenizerFast) while config.json
says model_type qwen2 loads here as that generic class; AutoTokenizer gives Qwen2Tokenizer, which normalises to
NFC and splits with its own pattern. Ids differ only on text those change; hub Qwen2 checkpoints name
Qwen2Tokenizer, and both loaders then agree. Of the model types checked (qwen3, qwen3_moe, qwen2_moe,
deepseek_v3, gemma2, gpt2, phi3, olmo2, llama, mistral) no other is overridden.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from framework.models.direct_tokenizer import DIRECT_CLASSES, DirectTokenizer, TokenizerFiles, refusal

log = logging.getLogger(__name__)


def load_tokenizer(model_dir: str | Path) -> Any:
    files = TokenizerFiles(model_dir)
    reason = refusal(files)
    if reason is None:
        return DirectTokenizer(files)
    log.info("tokenizer: transformers loads %s (%s)", model_dir, reason)
    return transformers_tokenizer(model_dir, files.tokenizer_class)


def transformers_tokenizer(model_dir: str | Path, tokenizer_class: str | None) -> Any:
    import transformers

    if tokenizer_class not in DIRECT_CLASSES:
        return transformers.AutoTokenizer.from_pretrained(model_dir)
    return getattr(transformers, tokenizer_class).from_pretrained(model_dir)
