"""The tokenizer transformers 5 loads for a model directory, rebuilt from its files without importing transformers.

For the maxtext backend (no torch): importing transformers took most of a GRPO run's 4.7 s tokenizer wait on an
H100 host, Python work on the GIL that the compiles could not overlap. `DirectTokenizer` gives the same results
as `<tokenizer_class>.from_pretrained(directory)` for the classes in DIRECT_CLASSES (transformers 5.x,
tokenization_utils_tokenizers.py, models/qwen2/tokenization_qwen2.py): the same `tokenizers.Tokenizer` backend,
added tokens added in the same calls, the special tokens of tokenizer_config.json (and Qwen2Tokenizer's defaults),
the chat template from chat_template.jinja or tokenizer_config.json rendered as transformers renders it
(framework/models/chat_template.py). Its surface is what the GRPO trainer uses, no more.

`refusal` names what in a directory it cannot reproduce exactly; framework/models/tokenizer.py then loads the
directory with transformers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE

from framework.models import chat_template
from framework.models.tiny import QWEN2_PRETOKENIZE_REGEX  # Qwen2Tokenizer's PRETOKENIZE_REGEX

DIRECT_CLASSES = ("Qwen2Tokenizer", "TokenizersBackend", "PreTrainedTokenizerFast")
NAMED_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
CLASS_DEFAULTS = {"Qwen2Tokenizer": {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                     "pad_token": "<|endoftext|>"}}


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _read_json(path: Path) -> Any:
    try:
        return _parse(path.read_text(encoding="utf-8"))
    except OSError:
        return None


class TokenizerFiles:
    """What transformers reads from a model directory to build a tokenizer that has a tokenizer.json."""

    def __init__(self, directory: str | Path):
        self.name_or_path = str(directory)
        self.directory = Path(directory)
        config = _read_json(self.directory / "tokenizer_config.json")
        self.config: dict = config if isinstance(config, dict) else {}
        self.tokenizer_class = self.config.get("tokenizer_class")
        self.serialized_text = None  # tokenizer.json, read only for a class this module builds
        self.serialized: dict = {}
        if self.tokenizer_class in DIRECT_CLASSES and (self.directory / "tokenizer.json").is_file():
            text = (self.directory / "tokenizer.json").read_text(encoding="utf-8")
            serialized = _parse(text)
            if isinstance(serialized, dict):  # else refused: transformers reports the file
                self.serialized_text, self.serialized = text, serialized
        jinja = self.directory / "chat_template.jinja"  # takes priority over tokenizer_config.json's
        self.chat_template = jinja.read_text(encoding="utf-8") if jinja.is_file() else self.config.get("chat_template")

    def exists(self, name: str) -> bool:
        return (self.directory / name).exists()

    def added_tokens(self) -> dict[int, AddedToken]:
        """tokenizer_config.json's added_tokens_decoder, else (no legacy files) tokenizer.json's added tokens."""
        if "added_tokens_decoder" in self.config:
            return {int(i): AddedToken(**token) for i, token in self.config["added_tokens_decoder"].items()}
        return {token["id"]: AddedToken(**{k: v for k, v in token.items() if k != "id"})
                for token in self.serialized.get("added_tokens", [])}

    def special_tokens(self) -> dict[str, str]:
        """The named special tokens that are set (name -> content), the class's defaults for absent keys."""
        values = {**CLASS_DEFAULTS.get(self.tokenizer_class, {}),
                  **{key: self.config[key] for key in NAMED_SPECIAL_TOKENS if key in self.config}}
        return {key: _content(value) for key, value in values.items() if value is not None}

    def extra_special_tokens(self) -> list[str]:
        extra = self.config.get("extra_special_tokens") or self.config.get("additional_special_tokens") or []
        return [_content(token) for token in extra]


def _content(token: Any) -> str:
    """A special token as tokenizer_config.json writes it: a string or a serialized AddedToken."""
    if isinstance(token, str):
        return token
    if isinstance(token, dict) and token.get("__type") == "AddedToken" and isinstance(token.get("content"), str):
        return token["content"]
    raise ValueError(f"special token {token!r}")


def refusal(files: TokenizerFiles) -> str | None:
    """Why DirectTokenizer cannot give transformers' tokenizer for these files (None: it can)."""
    config = files.config
    if files.tokenizer_class not in DIRECT_CLASSES:
        return f"tokenizer_class {files.tokenizer_class!r} is not one of {', '.join(DIRECT_CLASSES)}"
    if files.serialized_text is None:
        return "no tokenizer.json (or not a JSON object)"
    for key in ("fast_tokenizer_files", "fix_mistral_regex"):  # another file; the Mistral regex patch
        if key in config:
            return f"tokenizer_config.json sets {key}"
    if config.get("split_special_tokens"):
        return "tokenizer_config.json sets split_special_tokens"
    if [key for key, value in config.items()
            if key.endswith("_token") and key not in NAMED_SPECIAL_TOKENS and isinstance(value, (str, dict))]:
        return "model-specific special tokens (a *_token key besides the named ones)"
    if isinstance(config.get("extra_special_tokens"), dict):
        return "model-specific special tokens (extra_special_tokens is a mapping)"
    if config.get("model_specific_special_tokens"):
        return "model-specific special tokens (tokenizer_config.json sets model_specific_special_tokens)"
    if "added_tokens_decoder" not in config and (files.exists("special_tokens_map.json")
                                                 or files.exists("added_tokens.json")):
        return "the legacy special_tokens_map.json/added_tokens.json without an added_tokens_decoder"
    return _backend_refusal(files) or _special_token_refusal(files) or _template_refusal(files)


def _backend_refusal(files: TokenizerFiles) -> str | None:
    serialized, config = files.serialized, files.config
    if serialized.get("truncation") is not None or serialized.get("padding") is not None:
        return "tokenizer.json sets truncation or padding"
    model = serialized.get("model", {})
    is_bpe = model.get("type") == "BPE" or files.tokenizer_class == "Qwen2Tokenizer"  # Qwen2's rebuild is BPE
    if config.get("clean_up_tokenization_spaces") and (
            not is_bpe or config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output")):
        return "clean_up_tokenization_spaces applies"
    if files.tokenizer_class == "Qwen2Tokenizer" and (
            model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict) or "merges" not in model):
        return "Qwen2Tokenizer over a tokenizer.json without a BPE vocab and merges"
    return None


def _special_token_refusal(files: TokenizerFiles) -> str | None:
    """transformers adds a special token that is not an added token yet: only ones already there are handled."""
    try:
        added = files.added_tokens()
        special = [*files.special_tokens().values(), *files.extra_special_tokens()]
    except (TypeError, ValueError, AttributeError) as error:
        return f"an added or special token this module does not read ({error})"
    declared = {token.content for token in added.values() if token.special}
    missing = [token for token in special if token not in declared]
    return f"special tokens {missing} are not added tokens" if missing else None


def _template_refusal(files: TokenizerFiles) -> str | None:
    template = files.chat_template
    if files.exists("additional_chat_templates"):
        return "several chat templates (additional_chat_templates/)"
    if template is not None and not isinstance(template, str):
        return "several chat templates (a list in tokenizer_config.json)"
    if template is not None and chat_template.uses_unsupported_tags(template):
        return "the chat template uses transformers' {% generation %} tag"
    return None


class DirectTokenizer:
    """The tokenizer of a directory `refusal` accepts: what the GRPO trainer calls of transformers' tokenizer."""

    def __init__(self, files: TokenizerFiles):
        self.name_or_path = files.name_or_path
        self.chat_template: str | None = files.chat_template
        self._backend = _build_backend(files)
        self._special_tokens = files.special_tokens()  # the chat template's variables, as transformers passes them
        self.eos_token_id = self._token_id("eos_token")
        self.pad_token_id = self._token_id("pad_token")

    def _token_id(self, name: str) -> int | None:
        token = self._special_tokens.get(name)
        return None if token is None else self._backend.token_to_id(token)

    def __call__(self, texts: Sequence[str], add_special_tokens: bool = True) -> dict[str, list[list[int]]]:
        if isinstance(texts, str):
            raise TypeError("DirectTokenizer encodes a list of texts")
        encodings = self._backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return {"input_ids": [encoding.ids for encoding in encodings]}

    def batch_decode(self, sequences: Sequence[Sequence[int]], skip_special_tokens: bool = False) -> list[str]:
        return self._backend.decode_batch([list(ids) for ids in sequences], skip_special_tokens=skip_special_tokens)

    def apply_chat_template(self, conversation: Sequence[Mapping[str, str]], *, tokenize: bool,
                            add_generation_prompt: bool = False) -> str:
        """The prompt's text (tokenize=False only: encode it with __call__)."""
        if tokenize:
            raise ValueError("DirectTokenizer.apply_chat_template renders text only: pass tokenize=False")
        if not self.chat_template:
            raise ValueError(f"tokenizer {self.name_or_path!r} has no chat_template")
        if not conversation:
            raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
        return chat_template.render(self.chat_template, conversation, add_generation_prompt, self._special_tokens)


def _build_backend(files: TokenizerFiles) -> Tokenizer:
    """The backend as TokenizersBackend.__init__ (and Qwen2Tokenizer's) leaves it after from_pretrained."""
    if files.tokenizer_class == "Qwen2Tokenizer":
        backend = _qwen2_backend(files.serialized, files.config.get("add_prefix_space") or False)
    else:
        backend = Tokenizer.from_str(files.serialized_text)
    if backend.post_processor is None:  # TokenizersBackend.update_post_processor without BOS/EOS
        backend.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    backend.add_tokens([token for _, token in sorted(files.added_tokens().items())])
    if files.tokenizer_class == "Qwen2Tokenizer":  # the end of Qwen2Tokenizer.__init__
        named = list(dict.fromkeys([*files.special_tokens().values(), *files.extra_special_tokens()]))
        backend.add_tokens([AddedToken(token, special=True) for token in named])
    return backend


def _qwen2_backend(serialized: dict, add_prefix_space: bool) -> Tokenizer:
    """Qwen2Tokenizer's own pipeline over tokenizer.json's vocab and merges (it does not read the file's
    normaliser, pre-tokeniser or decoder), with the file's post-processor."""
    model = serialized["model"]
    merges = [tuple(merge.split(" ")) if isinstance(merge, str) else tuple(merge) for merge in model["merges"]]
    backend = Tokenizer(BPE(vocab=model["vocab"], merges=merges, dropout=None, unk_token=None,
                            continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False, byte_fallback=False))
    backend.decoder = decoders.ByteLevel()
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False),
    ])
    if serialized.get("post_processor") is not None:  # read as transformers reads it: from a vocabulary-less copy
        empty = {**serialized, "added_tokens": [], "model": {**model, "vocab": {}, "merges": []}}
        backend.post_processor = Tokenizer.from_str(json.dumps(empty)).post_processor
    return backend
