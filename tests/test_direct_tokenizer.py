"""framework/models/direct_tokenizer.py: the tokenizer transformers 5 loads, rebuilt without importing transformers,
checked against transformers' own loader (framework/models/tokenizer.transformers_tokenizer) on the tiny model
directories and on hub-like copies of them (a Qwen2.5-style tokenizer_config.json over a tokenizer.json whose own
pipeline differs from the one Qwen2Tokenizer rebuilds), and the refusals that send a directory to transformers."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from framework.core.paths import CONF_DIR, REPO_ROOT
from framework.data.gsm8k import SAMPLE_DIR, read_jsonl
from framework.data.prompts import render_prompts
from framework.models.direct_tokenizer import DirectTokenizer, TokenizerFiles, refusal
from framework.models.tiny import build_tiny_model
from framework.models.tokenizer import load_tokenizer, transformers_tokenizer

transformers = pytest.importorskip("transformers")

# Qwen2.5's chat template in outline: a default system turn, tools through tojson, tool calls and responses
QWEN25_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "<|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {{- '\\n<tool_call>\\n' + tool_call | tojson + '\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
# what else transformers' environment gives a template: namespace, dict, loop controls, the special tokens, errors
FEATURES_TEMPLATE = """{% set ns = namespace(count=0) %}{% set extra = dict(a=1, b=[1, 2]) %}
{% for message in messages %}{% if message.role == 'tool' %}{{ raise_exception('no tools: ' + message.content) }}
{% endif %}{% if loop.index > 3 %}{% break %}{% endif %}{% set ns.count = ns.count + 1 %}
  {{ message.role }}: {{ message.content | tojson }} {{ eos_token }}|{{ bos_token }}|{{ unk_token }}|{{ pad_token }}
  {{ extra | tojson }} {{ additional_special_tokens }}
{% endfor %}{{ ns.count }} {{ strftime_now('%Y') | length }}{% if add_generation_prompt %}<|im_start|>{% endif %}"""
# (content, special, lstrip): Qwen2Tokenizer re-adds its special tokens with default flags, the generic class not
EXTRA_TOKENS = [("<tool_call>", False, False), ("</tool_call>", False, False), ("<|object_ref_start|>", True, True)]


def _tiny(root: Path, name: str) -> Path:
    return build_tiny_model(yaml.safe_load((CONF_DIR / "model" / f"{name}.yaml").read_text()), root / name)


def _hub_like(tiny_dir: Path, out: Path, tokenizer_class: str, post_processor: bool = True, without: tuple = (),
              **config_changes) -> Path:
    """The tiny tokenizer as Qwen2.5 ships one: added tokens past the vocabulary (special and not), the template
    in tokenizer_config.json, and a tokenizer.json pipeline (GPT-2 byte-level, no NFC) unlike Qwen2Tokenizer's.
    `without`: tokenizer_config.json keys left out (Qwen2Tokenizer's defaults apply)."""
    shutil.copytree(tiny_dir, out)
    (out / "chat_template.jinja").unlink()
    serialized = json.loads((out / "tokenizer.json").read_text())
    size = len(serialized["model"]["vocab"])
    serialized["added_tokens"] += [{"id": size + i, "content": content, "single_word": False, "lstrip": lstrip,
                                    "rstrip": False, "normalized": False, "special": special}
                                   for i, (content, special, lstrip) in enumerate(EXTRA_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}
    serialized.update(normalizer=None, pre_tokenizer=byte_level, decoder=byte_level,
                      post_processor=byte_level if post_processor else None)
    (out / "tokenizer.json").write_text(json.dumps(serialized))
    config = {"add_prefix_space": False, "bos_token": None, "chat_template": QWEN25_TEMPLATE,
              "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                                       for t in serialized["added_tokens"]},
              "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|object_ref_start|>"],
              "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
              "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
              "tokenizer_class": tokenizer_class, "unk_token": None, **config_changes}
    (out / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in config.items() if k not in without}))
    return out


def _rename(directory: Path, out: Path, **config_changes) -> Path:
    shutil.copytree(directory, out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    (out / "tokenizer_config.json").write_text(json.dumps({**config, **config_changes}))
    return out


@pytest.fixture(scope="module")
def directories(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    qwen2, llama = _tiny(root, "tiny_qwen2"), _tiny(root, "tiny_llama")
    return {"tiny_qwen2": qwen2, "tiny_llama": llama,
            "tiny_qwen2_named_qwen2": _rename(qwen2, root / "named", tokenizer_class="Qwen2Tokenizer"),
            "hub_qwen2": _hub_like(qwen2, root / "hub_qwen2", "Qwen2Tokenizer"),
            "hub_generic": _hub_like(qwen2, root / "hub_generic", "PreTrainedTokenizerFast",
                                     clean_up_tokenization_spaces=True),  # BPE: transformers skips the clean-up
            # no post-processor; unk and pad by Qwen2Tokenizer's defaults
            "hub_llama_defaults": _hub_like(llama, root / "hub_llama", "Qwen2Tokenizer", post_processor=False,
                                            without=("unk_token", "pad_token"))}


TEXTS = ["Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72", "<|im_start|>user\n2+2?<|im_end|>", " a  b\t",
         "Cafe\u0301 12345 <tool_call>x</tool_call>  <|object_ref_start|>", "", "  \n\n  trailing  "]


@pytest.mark.parametrize("name", ["tiny_qwen2", "tiny_llama", "tiny_qwen2_named_qwen2", "hub_qwen2", "hub_generic",
                                  "hub_llama_defaults"])
def test_direct_tokenizer_equals_transformers_tokenizer(directories, name):
    directory = directories[name]
    ours = load_tokenizer(directory)
    theirs = transformers_tokenizer(directory, TokenizerFiles(directory).tokenizer_class)
    assert isinstance(ours, DirectTokenizer)
    # the whole tokenizers pipeline: model, normaliser, pre-tokeniser, post-processor, decoder, added tokens
    assert json.loads(ours._backend.to_str()) == json.loads(theirs.backend_tokenizer.to_str())
    assert (ours.eos_token_id, ours.pad_token_id) == (theirs.eos_token_id, theirs.pad_token_id)
    assert (ours.chat_template, ours.name_or_path) == (theirs.chat_template, theirs.name_or_path)

    examples = read_jsonl(SAMPLE_DIR / "train.jsonl") + read_jsonl(SAMPLE_DIR / "test.jsonl")
    for system_prompt in ("Be brief.", None):
        prompts = render_prompts(ours, examples, system_prompt)
        assert prompts == render_prompts(theirs, examples, system_prompt)
        for add_special_tokens in (False, True):
            for texts in (prompts, TEXTS):
                assert (ours(texts, add_special_tokens=add_special_tokens)["input_ids"] ==
                        theirs(texts, add_special_tokens=add_special_tokens)["input_ids"])

    rng, size = random.Random(0), len(theirs)
    special = theirs.all_special_ids
    rows = [[rng.randrange(size) for _ in range(rng.randrange(40))] for _ in range(200)]
    rows += [[rng.choice(special + [rng.randrange(size)]) for _ in range(12)] for _ in range(50)]
    for skip in (True, False):
        assert ours.batch_decode(rows, skip_special_tokens=skip) == theirs.batch_decode(rows, skip_special_tokens=skip)


def test_the_hub_like_qwen2_directory_tokenises_by_the_rebuilt_pipeline_not_its_file(directories):
    """The fixture exercises Qwen2Tokenizer's rebuild: read by its file's own pipeline, the ids would differ."""
    text = ["Cafe\u0301 12345  <|object_ref_start|>"]
    qwen2, generic = load_tokenizer(directories["hub_qwen2"]), load_tokenizer(directories["hub_generic"])
    assert qwen2(text)["input_ids"] != generic(text)["input_ids"]


@pytest.mark.parametrize("messages", [
    [{"role": "system", "content": "S"}, {"role": "user", "content": "<b>q\" & 'x'</b>"}],
    [{"role": "user", "content": str(i)} for i in range(6)],
])
def test_chat_template_renders_in_transformers_environment(directories, tmp_path, messages):
    directory = _rename(directories["hub_qwen2"], tmp_path / "features", chat_template=FEATURES_TEMPLATE)
    ours, theirs = load_tokenizer(directory), transformers_tokenizer(directory, "Qwen2Tokenizer")
    for generation_prompt in (True, False):
        assert (ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt) ==
                theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt))


@pytest.mark.parametrize("template, error", [
    ("{{ raise_exception('bad role') }}", "TemplateError"),
    ("{% set ns = namespace(_hidden=1) %}", "SecurityError"),
    ("{{ messages.append(1) }}", "SecurityError"),  # the immutable sandbox
])
def test_chat_template_errors_are_transformers_errors(directories, tmp_path, template, error):
    directory = _rename(directories["hub_qwen2"], tmp_path / "errors", chat_template=template)
    messages = [{"role": "user", "content": "hi"}]
    for tokenizer in (load_tokenizer(directory), transformers_tokenizer(directory, "Qwen2Tokenizer")):
        with pytest.raises(Exception) as raised:
            tokenizer.apply_chat_template(messages, tokenize=False)
        assert type(raised.value).__name__ == error


def _edit_json(directory: Path, name: str, **changes) -> None:
    path = directory / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


MUTATIONS = {  # what is done to a copy of hub_qwen2 -> the refusal's words
    "unknown class": (lambda d: _edit_json(d, "tokenizer_config.json", tokenizer_class="NoSuchTokenizer"),
                      "is not one of"),
    "llama class": (lambda d: _edit_json(d, "tokenizer_config.json", tokenizer_class="LlamaTokenizerFast"),
                    "is not one of"),
    "truncation": (lambda d: _edit_json(d, "tokenizer.json", truncation={
        "direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0}), "truncation or padding"),
    "split special tokens": (lambda d: _edit_json(d, "tokenizer_config.json", split_special_tokens=True),
                             "split_special_tokens"),
    "mistral regex": (lambda d: _edit_json(d, "tokenizer_config.json", fix_mistral_regex=True), "fix_mistral_regex"),
    "model-specific token": (lambda d: _edit_json(d, "tokenizer_config.json", image_token="<|object_ref_start|>"),
                             "model-specific special tokens"),
    "model-specific mapping": (lambda d: _edit_json(d, "tokenizer_config.json", model_specific_special_tokens={
        "image_token": "<tool_call>"}), "model-specific special tokens"),
    "eos not an added token": (lambda d: _edit_json(d, "tokenizer_config.json", eos_token="Natalia"),
                               "are not added tokens"),
    "clean-up forced": (lambda d: _edit_json(
        d, "tokenizer_config.json", clean_up_tokenization_spaces=True,
        clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output=True), "clean_up"),
    "template list": (lambda d: _edit_json(d, "tokenizer_config.json", chat_template=[
        {"name": "default", "template": "{{ messages[0].content }}"}]), "several chat templates"),
    "template directory": (lambda d: (d / "additional_chat_templates").mkdir() or (
        d / "additional_chat_templates" / "tools.jinja").write_text("{{ 1 }}"), "several chat templates"),
    "generation tag": (lambda d: _edit_json(d, "tokenizer_config.json", chat_template=(
        "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}")), "generation"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_what_it_cannot_reproduce_goes_to_transformers(directories, tmp_path, mutation):
    directory = shutil.copytree(directories["hub_qwen2"], tmp_path / "mutated")
    assert refusal(TokenizerFiles(directory)) is None
    mutate, words = MUTATIONS[mutation]
    mutate(directory)
    files = TokenizerFiles(directory)
    assert words in (refusal(files) or "")
    tokenizer = load_tokenizer(directory)
    assert not isinstance(tokenizer, DirectTokenizer)
    assert type(tokenizer) is type(transformers_tokenizer(directory, files.tokenizer_class))


def test_a_legacy_special_tokens_map_or_a_missing_tokenizer_json_goes_to_transformers(directories, tmp_path):
    legacy = shutil.copytree(directories["tiny_qwen2"], tmp_path / "legacy")  # no added_tokens_decoder
    assert refusal(TokenizerFiles(legacy)) is None
    (legacy / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    assert "legacy" in refusal(TokenizerFiles(legacy))
    assert not isinstance(load_tokenizer(legacy), DirectTokenizer)
    for broken in ("", "[]"):
        (legacy / "tokenizer.json").write_text(broken)
        assert "no tokenizer.json" in refusal(TokenizerFiles(legacy))
        (legacy / "tokenizer.json").unlink()
        assert "no tokenizer.json" in refusal(TokenizerFiles(legacy))


def test_a_word_level_tokenizer_with_clean_up_goes_to_transformers(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "<|im_end|>": 1, "a": 2, ",": 3}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    saved = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token="<|im_end|>")
    saved.save_pretrained(tmp_path / "plain")
    assert refusal(TokenizerFiles(tmp_path / "plain")) is None
    _edit_json(tmp_path / "plain", "tokenizer_config.json", clean_up_tokenization_spaces=True)
    assert "clean_up" in refusal(TokenizerFiles(tmp_path / "plain"))


def test_only_the_trainers_surface_is_offered(directories):
    tokenizer = load_tokenizer(directories["hub_qwen2"])
    with pytest.raises(ValueError, match="tokenize=False"):
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=True)
    with pytest.raises(TypeError, match="list of texts"):
        tokenizer("one text")
    with pytest.raises(TypeError, match="only string 'role' and 'content'"):
        tokenizer.apply_chat_template([{"role": "user", "content": "x", "reasoning_content": "y"}], tokenize=False)


def _imports_after_loading(directory: Path) -> str:
    code = ("import sys; from framework.models.tokenizer import load_tokenizer; "
            f"t = load_tokenizer({str(directory)!r}); t(['a 1']); t.batch_decode([[1, 2]]); "
            "t.apply_chat_template([{'role': 'user', 'content': 'x'}], tokenize=False); "
            "print(type(t).__name__, sorted({'transformers', 'torch'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_loading_imports_neither_transformers_nor_torch_and_the_fallback_not_torch(directories, tmp_path):
    assert _imports_after_loading(directories["hub_qwen2"]) == "DirectTokenizer []"
    refused = _rename(directories["hub_qwen2"], tmp_path / "refused", split_special_tokens=True)
    assert _imports_after_loading(refused) == "Qwen2Tokenizer ['transformers']"  # the class the file names
