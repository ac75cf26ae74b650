"""Offline random-init HF model directories (weights + tokenizer) for tests and CPU runs.

Weights and tokenizers cannot be downloaded here, so a `random_init` model config is turned into
a complete HF directory: a seeded random-init model saved with `save_pretrained`, plus a byte-level
BPE tokenizer trained with `tokenizers` on a small corpus and a Qwen-style (ChatML) chat template.
Every backend loads such a directory exactly like a hub checkpoint. Builds are cached: a directory
holding a build of the same fingerprint is reused.

transformers/tokenizers/torch are imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from framework.core.errors import ConfigError, DataError
from framework.core.paths import path_part
from framework.core.plain import to_plain

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)

# ChatML as used by Qwen2.5: system/user/assistant turns, optional generation prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# The first GSM8K training examples (MIT License, Copyright (c) 2021 OpenAI): enough text for a
# 512-token byte-level BPE vocabulary, in the domain the tiny models are used for.
GSM8K_SAMPLE = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?\n"
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?\n"
    "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\n"
    "Working 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she "
    "needs. Her parents decided to give her $15 for that purpose, and her grandparents twice as much "
    "as her parents. How much more money does Betty need to buy the wallet?\n"
    "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\n"
    "Betty's grandparents gave her 15 * 2 = $<<15*2=30>>30.\n"
    "This means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5",
    "Julie is reading a 120-page book. Yesterday, she was able to read 12 pages and today, she read "
    "twice as many pages as yesterday. If she wants to read half of the remaining pages tomorrow, "
    "how many pages should she read?\n"
    "Maila read 12 x 2 = <<12*2=24>>24 pages today.\n"
    "So she was able to read a total of 12 + 24 = <<12+24=36>>36 pages since yesterday.\n"
    "There are 120 - 36 = <<120-36=84>>84 pages left to be read.\n"
    "Since she wants to read half of the remaining pages tomorrow, then she should read "
    "84/2 = <<84/2=42>>42 pages.\n#### 42",
    "James writes a 3-page letter to 2 different friends twice a week.  How many pages does he "
    "write a year?\n"
    "He writes each friend 3*2=<<3*2=6>>6 pages a week\n"
    "So he writes 6*2=<<6*2=12>>12 pages every week\n"
    "That means he writes 12*52=<<12*52=624>>624 pages a year\n#### 624",
    "Mark has a garden with flowers. He planted plants of three different colors in it. Ten of them "
    "are yellow, and there are 80% more of those in purple. There are only 25% as many green flowers "
    "as there are yellow and purple flowers. How many flowers does Mark have in his garden?\n"
    "There are 80/100 * 10 = <<80/100*10=8>>8 more purple flowers than yellow flowers.\n"
    "So in Mark's garden, there are 10 + 8 = <<10+8=18>>18 purple flowers.\n"
    "Purple and yellow flowers sum up to 10 + 18 = <<10+18=28>>28 flowers.\n"
    "That means in Mark's garden there are 25/100 * 28 = <<25/100*28=7>>7 green flowers.\n"
    "So in total Mark has 28 + 7 = <<28+7=35>>35 plants in his garden.\n#### 35",
)

# transformers.models.qwen2.tokenization_qwen2.PRETOKENIZE_REGEX
QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                           r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

BUILD_MARKER = "crucible_build.json"


def build_tiny_model(model_cfg: Mapping[str, Any], out_dir: Path, corpus_texts: list[str] | None = None,
                     seed: int = 0, on_metadata: Callable[[Path], None] | None = None,
                     metadata_only: bool = False) -> Path:
    """Build (or reuse) a random-init HF model directory from `model_cfg["hf_config"]`.

    The directory holds config.json, generation_config.json, model.safetensors and a
    `PreTrainedTokenizerFast` (vocab size = hf_config.vocab_size, special tokens
    <|endoftext|> (pad), <|im_start|>, <|im_end|> (eos), ChatML chat template).
    `on_metadata(dir)`: called once a directory with everything but the weights (config.json,
    generation_config.json, the tokenizer: `metadata_dir(out_dir)`, the same files) is published, before
    the weights are built (framework/models/source.py overlaps the weights with a run's compiles).
    `metadata_only`: stop there (no torch needed: the metadata comes out byte for byte the same without it).
    """
    out_dir = Path(out_dir)
    hf_config = _hf_config_of(model_cfg)
    texts = list(corpus_texts) if corpus_texts else list(GSM8K_SAMPLE)
    dtype_name = _torch_dtype_name(model_cfg)
    fingerprint = _fingerprint(hf_config, texts, dtype_name, seed)
    if _is_complete_build(out_dir, fingerprint):
        return out_dir

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        tokenizer = _train_tokenizer(texts, int(hf_config["vocab_size"]))
        config, generation = _model_configs(hf_config, tokenizer, dtype_name)
        tokenizer.save_pretrained(staging)
        config.save_pretrained(staging)
        generation.save_pretrained(staging)
        if on_metadata is not None or metadata_only:
            published_metadata = _publish_metadata(staging, metadata_dir(out_dir), fingerprint)
            if on_metadata is not None:
                on_metadata(published_metadata)
            if metadata_only:
                return published_metadata
        _save_random_model(config, generation, dtype_name, seed, staging)
        (staging / BUILD_MARKER).write_text(json.dumps({"fingerprint": fingerprint}))
        _publish(staging, out_dir, fingerprint)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_dir


def tiny_model_dir(model_cfg: Mapping[str, Any], cache_root: Path) -> Path:
    """Where a random-init build of `model_cfg` lives: one directory per architecture and dtype, so editing
    a config never reuses a stale build."""
    name = path_part(model_cfg.get("name") or "model")  # a typed HF id would nest the cache, `..` leave it
    blob = json.dumps([_hf_config_of(model_cfg), _torch_dtype_name(model_cfg)], sort_keys=True)
    return Path(cache_root) / f"{name}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def metadata_dir(out_dir: Path) -> Path:
    """The build's files without the weights, published before them."""
    return Path(out_dir).parent / f"{Path(out_dir).name}.metadata"


def published(model_cfg: Mapping[str, Any], out_dir: Path, seed: int = 0) -> tuple[bool, bool]:
    """(the whole build of `model_cfg` is in out_dir, its metadata directory is)."""
    fingerprint = _fingerprint(_hf_config_of(model_cfg), list(GSM8K_SAMPLE), _torch_dtype_name(model_cfg), seed)
    return _is_complete_build(Path(out_dir), fingerprint), _is_complete_build(metadata_dir(out_dir), fingerprint)


def resolve_model_dir(model_cfg: Mapping[str, Any], cache_root: Path) -> str:
    """Where to load the model from: `path` if set, else a cached random-init build when
    `random_init` (any architecture; the tiny_* configs are what tests and CPU runs use), else the
    the hub id's local snapshot (framework/models/hub.py: HF cache or download; offline, one line)."""
    path = model_cfg.get("path")
    if path:
        if not Path(path).is_dir():
            raise DataError(f"model.path: directory {path} does not exist (set it to a local HF model "
                            f"directory, or null to use model.hub_id)")
        return str(path)
    if model_cfg.get("random_init"):
        return str(build_tiny_model(model_cfg, tiny_model_dir(model_cfg, cache_root)))
    hub_id = model_cfg.get("hub_id")
    if not hub_id:
        raise ConfigError(f"model {model_cfg.get('name')!r}: set one of model.path, model.hub_id or "
                          f"model.random_init=true")
    from framework.models.hub import hub_snapshot

    return hub_snapshot(str(hub_id))


def _hf_config_of(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    hf_config = model_cfg.get("hf_config")
    if not hf_config or "model_type" not in hf_config or "vocab_size" not in hf_config:
        raise ConfigError(f"model {model_cfg.get('name')!r}: model.hf_config needs at least model_type and "
                          f"vocab_size to build a random-init model")
    return to_plain(hf_config)


def _torch_dtype_name(model_cfg: Mapping[str, Any]) -> str:
    """The model's dtype name (framework.core.dtypes), also torch's attribute name."""
    from framework.core import dtypes

    return dtypes.check(str(model_cfg.get("dtype") or "float32"), "model.dtype")


def _fingerprint(hf_config: dict, texts: list[str], dtype_name: str, seed: int) -> str:
    blob = json.dumps({"hf_config": hf_config, "texts": texts, "dtype": dtype_name, "seed": seed},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _is_complete_build(out_dir: Path, fingerprint: str) -> bool:
    marker = out_dir / BUILD_MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("fingerprint") == fingerprint
    except (json.JSONDecodeError, OSError):
        return False


def _publish(staging: Path, out_dir: Path, fingerprint: str) -> None:
    """Move a finished build into place; a concurrent builder that got there first wins."""
    if out_dir.exists() and not _is_complete_build(out_dir, fingerprint):
        shutil.rmtree(out_dir)  # a stale or interrupted build
    try:
        staging.rename(out_dir)
    except OSError:
        if not _is_complete_build(out_dir, fingerprint):
            raise


def _publish_metadata(staging: Path, target: Path, fingerprint: str) -> Path:
    """Copy the build's files so far (no weights) into `target`, published as atomically as the build."""
    if not _is_complete_build(target, fingerprint):
        copy = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            shutil.copytree(staging, copy, dirs_exist_ok=True)
            (copy / BUILD_MARKER).write_text(json.dumps({"fingerprint": fingerprint}))
            _publish(copy, target, fingerprint)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
    return target


def _train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    byte_alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(byte_alphabet) + len(SPECIAL_TOKENS):
        raise ConfigError(f"model.hf_config.vocab_size: {vocab_size} is too small for a byte-level "
                          f"tokenizer (needs >= {len(byte_alphabet) + len(SPECIAL_TOKENS)})")
    # Qwen2's normaliser and pre-tokeniser (digits split one by one): transformers rebuilds exactly
    # this pipeline when AutoTokenizer loads a qwen2 directory, so every model type tokenises alike.
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=byte_alphabet, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=IM_END, pad_token=ENDOFTEXT)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _model_configs(hf_config: dict, tokenizer, dtype_name: str) -> tuple[Any, Any]:
    """The model's transformers config and generation config, as `save_pretrained` of the model writes them."""
    from transformers import AutoConfig, GenerationConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    fields = {k: v for k, v in hf_config.items() if k not in ("torch_dtype", "dtype")}
    fields.update(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=pad_id)
    try:
        config = AutoConfig.for_model(**fields)
    except (ValueError, KeyError) as error:
        raise ConfigError(f"model.hf_config: transformers cannot build model_type "
                          f"{hf_config['model_type']!r}: {error}") from error
    config.architectures = [MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.model_type, "")]
    config.dtype = dtype_name
    generation = GenerationConfig.from_model_config(config)
    generation.eos_token_id = [eos_id, pad_id]
    generation.pad_token_id = pad_id
    generation.bos_token_id = pad_id
    return config, generation


def _save_random_model(config, generation, dtype_name: str, seed: int, out_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from framework.core.dtypes import torch_dtype

    torch.manual_seed(seed)
    # Initialised in float32, then cast: torch's CPU normal_ in bfloat16 ran at ~20M values/s on a 16-core
    # GPU host (24.6 s of a 41 s Qwen2.5-0.5B build there; docs/benchmarks.md, issue 15, session 11).
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(torch_dtype(dtype_name))
    model.generation_config = generation
    _save_without_a_bar(model, out_dir)


def _save_without_a_bar(model, out_dir: Path) -> None:
    """save_pretrained without transformers' "Writing model shards" bar: a run draws one bar, its steps', and
    none under progress=false (the build knows no run; the torch trainers turn transformers' bars off too)."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        model.save_pretrained(out_dir)
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()
