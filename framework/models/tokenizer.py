"""A model directory's tokenizer, loaded without importing torch where that gives AutoTokenizer's tokenizer.

transformers' AutoTokenizer reads the model's configuration classes, and with them torch (2-3 s on the
dev CPU; a GRPO run's trainer setup took 11.4 s with it on an H100, 4.2 s without on an H200). For the
classes in DIRECT the class tokenizer_config.json names is the one AutoTokenizer returns (or, for the generic ones, reads the same tokenizer.json to the same
ids), so a backend that does not run torch (maxtext) loads it directly. Any other class goes through
AutoTokenizer, which overrides some names (a LlamaTokenizerFast over a byte-level tokenizer.json loads as
the generic backend; some model types get their registered class).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DIRECT = ("Qwen2Tokenizer", "TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(model_dir: str | Path) -> Any:
    import transformers

    config = Path(model_dir) / "tokenizer_config.json"
    try:
        name = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        name = None
    if name not in DIRECT:
        return transformers.AutoTokenizer.from_pretrained(model_dir)
    return getattr(transformers, name).from_pretrained(model_dir)
