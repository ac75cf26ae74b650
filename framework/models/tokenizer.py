"""A model directory's tokenizer, loaded without importing torch.

transformers' AutoTokenizer reads the model's configuration classes, and with them torch (2-3 s on the
dev CPU, more with a CUDA build). A backend that does not run torch (maxtext) loads the class that
tokenizer_config.json names, which is the class AutoTokenizer ends up calling; a directory that names
none, or a class transformers does not export, goes through AutoTokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_tokenizer(model_dir: str | Path) -> Any:
    import transformers

    config = Path(model_dir) / "tokenizer_config.json"
    try:
        name = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        name = None
    tokenizer_class = getattr(transformers, name, None) if isinstance(name, str) else None
    if tokenizer_class is None or not hasattr(tokenizer_class, "from_pretrained"):
        return transformers.AutoTokenizer.from_pretrained(model_dir)
    return tokenizer_class.from_pretrained(model_dir)
