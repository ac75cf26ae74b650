"""task=pretrain data: jsonl `text` -> the model's tokenizer -> megatron's indexed format -> GPTDataset.

The token file (`text_document.bin/.idx`, built with IndexedDatasetBuilder, one document per record,
each ended by the tokenizer's EOS as megatron's EOD) is cached under
`<cache>/megatron_data/<key>/`, the key a hash of the data file and the tokenizer's files, so a
second run (or every other rank) reuses it. Global rank 0 builds it while the others wait.
Samples come from GPTDataset (BlendedMegatronDatasetBuilder), whose shuffled sample index is
cached in the same folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from framework.core.errors import DataError
from framework.data.records import RecordSpec, load_records, split_file

log = logging.getLogger(__name__)
PREFIX = "text_document"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "tokenizer.model")


def load_tokenizer(model_dir: str):
    """The model directory's HF tokenizer; a directory without one is a DataError."""
    from transformers import AutoTokenizer

    if not any((Path(model_dir) / name).is_file() for name in TOKENIZER_FILES):
        raise DataError(f"model.path: {model_dir} has no tokenizer (tokenizer.json or tokenizer.model); "
                        f"task=pretrain tokenises with the model's own tokenizer")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError) as error:
        raise DataError(f"model.path: cannot load the tokenizer of {model_dir}: {str(error).splitlines()[0]}") from None
    if tokenizer.eos_token_id is None:
        raise DataError(f"model.path: the tokenizer of {model_dir} has no eos token (needed as end of document)")
    return tokenizer


def _digest(paths: list[Path], extra: str) -> str:
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(spec: RecordSpec, model_dir: str) -> str:
    """A hash of the train file (or the hub id) and the tokenizer's files."""
    files = [Path(model_dir) / n for n in TOKENIZER_FILES if (Path(model_dir) / n).is_file()]
    if spec.source != "hub":
        data_file = split_file(spec, "train")
        if not data_file.is_file():
            raise DataError(f"{data_file}: no such jsonl file (data.path of data={spec.name})")
        files.insert(0, data_file)
    return _digest(files, json.dumps({"data": spec.path if spec.source == "hub" else None,
                                      "limit": spec.train_limit, "format": 1}))


def build_token_file(spec: RecordSpec, tokenizer, folder: Path, progress) -> Path:
    """Tokenise the train split into `folder/text_document.{bin,idx}` (atomically); returns the prefix."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    prefix = folder / PREFIX
    if prefix.with_suffix(".idx").is_file():
        return prefix
    texts = load_records(spec, "train", spec.train_limit)
    staging = folder.with_name(f".{folder.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    dtype = np.int32 if len(tokenizer) > np.iinfo(np.uint16).max + 1 else np.uint16
    builder = IndexedDatasetBuilder(str(staging / f"{PREFIX}.bin"), dtype=dtype)
    tokens = 0
    for text in progress(texts, total=len(texts), desc="tokenise", unit="doc"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        builder.add_item(torch.tensor(ids))
        builder.end_document()
        tokens += len(ids)
    builder.finalize(str(staging / f"{PREFIX}.idx"))
    (staging / "source.json").write_text(json.dumps({"data": spec.name, "documents": len(texts), "tokens": tokens}))
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(folder)
    except OSError:  # another process published it first
        shutil.rmtree(staging, ignore_errors=True)
    log.info("pretrain data: %d documents, %d tokens -> %s", len(texts), tokens, folder)
    return prefix


class DatasetTokenizer:
    """What GPTDataset asks of a tokenizer: vocabulary size, end of document, padding."""

    def __init__(self, tokenizer, model_dir: str):
        self.vocab_size = len(tokenizer)
        self.eod = tokenizer.eos_token_id
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else -1
        self.unique_identifiers = {"class": "HFTokenizer", "path": str(model_dir), "vocab_size": self.vocab_size}


def gpt_datasets(prefix: Path, tokenizer, model_dir: str, seq_length: int, split: list[int],
                 samples: list[int], seed: int):
    """(train, valid) GPTDatasets of `samples` = [train, valid] sequences from the token file."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    config = GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, blend=([str(prefix)], None),
        split=",".join(str(w) for w in split), path_to_cache=str(prefix.parent / "index_cache"),
        tokenizer=DatasetTokenizer(tokenizer, model_dir), reset_position_ids=False, reset_attention_mask=False,
        eod_mask_loss=False, create_attention_mask=False, mmap_bin_files=False)
    sizes = [samples[0], samples[1] if split[1] > 0 else 0, 0]
    try:
        train, valid, _ = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    except (AssertionError, ValueError, IndexError) as error:
        raise DataError(f"data: the token file {prefix} cannot give sequences of {seq_length} tokens with split "
                        f"{split}: {error}") from None
    if train is None or len(train) == 0:
        raise DataError(f"data: no training sequence of {seq_length} tokens in {prefix}; use more text or a "
                        f"shorter pretrain.seq_length")
    return train, valid
