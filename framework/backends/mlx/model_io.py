"""Load an HF safetensors directory with mlx-lm, check its tokenizer, export a fused HF directory.

The export is what transformers, backend torch and backend maxtext load as a starting point:
`model.safetensors` (HF parameter names, which mlx-lm keeps for llama/qwen2/qwen3), the source
`config.json` (dtype updated) and every tokenizer file of the source directory.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from framework.core.dtypes import mlx_dtype
from framework.core.errors import BackendError, DataError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
NOT_COPIED = ("model.safetensors.index.json", "crucible_build.json")


def local_model_dir(source: str, key: str = "model.path") -> Path:
    """`source` as a local directory: a path as is, a hub id through mlx-lm's (cached) download."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if source.startswith(("/", ".", "~")):
        raise DataError(f"{key}: directory {source} does not exist (a local HF model directory or a hub id)")
    from mlx_lm.utils import _download

    try:
        return Path(_download(source))
    except Exception as error:  # huggingface_hub raises many types offline: one line
        raise BackendError(f"model {source}: could not fetch it from the hub ({type(error).__name__}); set "
                           f"model.path=DIR (a local HF directory) or model.random_init=true") from None


def check_model_dir(path: Path) -> None:
    """DataError naming the missing piece of an HF model directory (before any weight is read)."""
    if not (path / "config.json").is_file():
        raise DataError(f"model.path: {path} has no config.json (not an HF model directory)")
    if not list(path.glob("model*.safetensors")):
        raise DataError(f"model.path: {path} has no model*.safetensors weights (backend=mlx loads safetensors)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise DataError(f"model.path: {path} has no tokenizer (one of {', '.join(TOKENIZER_FILES)}); save the "
                        f"tokenizer next to the weights (tokenizer.save_pretrained)")


def load(path: Path, dtype: str):
    """(model, HF tokenizer) from an HF directory, weights cast to `dtype`; the tokenizer must have a chat template."""
    from mlx_lm.utils import load_model, load_tokenizer

    check_model_dir(path)
    try:
        model, config = load_model(path)
    except ValueError as error:  # an architecture mlx-lm lacks, or weights that do not fit it
        raise BackendError(f"model.path: {path}: mlx-lm cannot load it: {str(error).splitlines()[0]}") from None
    tokenizer = load_tokenizer(path, eos_token_ids=config.get("eos_token_id"))._tokenizer  # mlx-lm wraps HF's
    if not getattr(tokenizer, "chat_template", None):
        raise DataError(f"model.path: {path}: the tokenizer has no chat template (chat_template in "
                        f"tokenizer_config.json or chat_template.jinja); SFT and DPO render chats with it")
    target = mlx_dtype(dtype)
    model.set_dtype(target, predicate=lambda current: mx.issubdtype(current, mx.floating))
    return model, tokenizer


def export_hf(model, source: Path, out_dir: Path) -> Path:
    """Write the (already fused) model as an HF safetensors directory next to the source's config and tokenizer."""
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights, metadata={"format": "pt"})
    config = json.loads((source / "config.json").read_text())
    dtypes = {str(v.dtype).removeprefix("mlx.core.") for v in weights.values()}
    config["dtype"] = dtypes.pop() if len(dtypes) == 1 else config.get("dtype")
    config.pop("torch_dtype", None)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    for file in source.iterdir():
        if file.is_file() and file.name not in NOT_COPIED and file.name != "config.json" \
                and not file.name.endswith(".safetensors"):
            shutil.copy2(file, out_dir / file.name)
    return out_dir
