"""GSM8K loading, the shipped sample, synthetic arithmetic, prompt rendering and resumable batching."""

import json
from pathlib import Path

import pytest

from framework.core.errors import CheckpointError, ConfigError, DataError
from framework.data.arithmetic import evaluate, generate_arithmetic
from framework.data.gsm8k import SAMPLE_DIR, load_from_hub, load_gsm8k, read_jsonl
from framework.data.prompts import SYSTEM_PROMPT, ShuffledBatches, batches_drawn, build_messages, render_prompt, render_prompts

SHARED_GSM8K = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"  # ../shared beside the repo
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---- GSM8K files -------------------------------------------------------------------------------


def test_sample_ships_both_splits_and_the_license():
    train, test = load_gsm8k("sample", "train"), load_gsm8k("sample", "test")
    assert (len(train), len(test)) == (256, 128)
    assert "MIT License" in (SAMPLE_DIR / "LICENSE").read_text()
    assert train[0].reference == "72" and train[0].question.startswith("Natalia sold clips")


@pytest.mark.skipif(not SHARED_GSM8K.is_dir(), reason="needs the shared GSM8K copy")
def test_sample_is_the_head_of_the_real_data_set():
    first_real_lines = SHARED_GSM8K.joinpath("test.jsonl").read_text().splitlines()[:128]
    assert SAMPLE_DIR.joinpath("test.jsonl").read_text().splitlines() == first_real_lines


def test_folder_file_and_limit(tmp_path):
    record = {"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}
    write_lines(tmp_path / "train.jsonl", [json.dumps(record)] * 3 + [""])
    assert len(load_gsm8k(tmp_path, "train")) == 3
    assert len(load_gsm8k(str(tmp_path / "train.jsonl"), "train", limit=2)) == 2
    assert load_gsm8k(tmp_path, "train")[0].reference == "4"


def test_reference_keeps_thousands_separators_as_written(tmp_path):
    path = write_lines(tmp_path / "d.jsonl", [json.dumps({"question": "q", "answer": "x\n#### 1,200"})])
    assert read_jsonl(path)[0].reference == "1,200"


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("not json at all", "not valid JSON"),
        (json.dumps({"question": "q"}), "missing or non-string field(s) ['answer']"),
        (json.dumps({"question": "q", "answer": "the answer is 4"}), "does not end with '#### <number>'"),
        (json.dumps({"question": "q", "answer": "#### "}), "does not end with '#### <number>'"),
        (json.dumps([1, 2]), "expected a JSON object"),
    ],
)
def test_bad_record_names_file_and_line(tmp_path, line, complaint):
    good = json.dumps({"question": "q", "answer": "#### 1"})
    path = write_lines(tmp_path / "bad.jsonl", [good, line])
    with pytest.raises(DataError) as error:
        read_jsonl(path)
    assert f"{path}:2" in str(error.value) and complaint in str(error.value)


def test_missing_file_and_unknown_split(tmp_path):
    with pytest.raises(DataError, match="no such GSM8K jsonl file"):
        load_gsm8k(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="no such GSM8K jsonl file"):
        load_gsm8k(tmp_path, "test")  # a folder without test.jsonl
    with pytest.raises(DataError, match=r"valid splits: \['train', 'test'\]"):
        load_gsm8k("sample", "validation")


def test_hub_code_path_on_a_local_copy_of_the_hub_layout(tmp_path):
    # The same datasets.load_dataset(id, "main", split=...) call as for "openai/gsm8k", on a folder
    # laid out like that hub repository (README config + main/<split>-*.parquet).
    datasets = pytest.importorskip("datasets")
    repo = tmp_path / "gsm8k_repo"
    (repo / "main").mkdir(parents=True)
    rows = [json.loads(line) for line in SAMPLE_DIR.joinpath("test.jsonl").read_text().splitlines()[:4]]
    datasets.Dataset.from_list(rows).to_parquet(str(repo / "main" / "test-00000-of-00001.parquet"))
    config = "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: test\n    path: main/test-*\n---\n"
    (repo / "README.md").write_text(config)
    examples = load_from_hub(str(repo), "test", limit=3, cache_dir=str(tmp_path / "cache"))
    assert [example.question for example in examples] == [row["question"] for row in rows[:3]]
    assert examples[0].reference == "18"


def test_hub_failure_is_one_line_data_error(tmp_path):
    pytest.importorskip("datasets")
    (tmp_path / "not_a_dataset_repo").mkdir()  # a local folder: datasets reads it, nothing asks the hub
    with pytest.raises(DataError, match="data.path: .*not_a_dataset_repo .split test.: could not load") as error:
        load_from_hub(str(tmp_path / "not_a_dataset_repo"), "test", cache_dir=str(tmp_path / "cache"))
    assert "\n" not in str(error.value)


# ---- synthetic arithmetic ----------------------------------------------------------------------


def test_arithmetic_is_seeded_and_in_gsm8k_format():
    first = generate_arithmetic(50, seed=3, num_operands=3, max_value=12, ops=("+", "-", "*"))
    assert first == generate_arithmetic(50, seed=3, num_operands=3, max_value=12, ops=("+", "-", "*"))
    assert first != generate_arithmetic(50, seed=4, num_operands=3, max_value=12, ops=("+", "-", "*"))
    for example in first:
        expression = example.question.removeprefix("What is ").removesuffix("?")
        assert example.answer.endswith(f"#### {example.reference}")
        assert int(example.reference) == eval(expression)  # test-only oracle: Python's own precedence
        operands = [int(token) for token in expression.split() if token.isdigit()]
        assert len(operands) == 3 and all(0 <= value <= 12 for value in operands)


def test_arithmetic_precedence_by_hand():
    assert evaluate([7, 3, 2], ["+", "*"]) == 13
    assert evaluate([7, 3, 2], ["-", "*"]) == 1
    assert evaluate([2, 3, 4, 5], ["*", "-", "*"]) == -14


def test_arithmetic_only_uses_requested_ops():
    questions = [example.question for example in generate_arithmetic(40, seed=0, ops=("*",))]
    assert all("*" in question and "+" not in question and " - " not in question for question in questions)


@pytest.mark.parametrize(
    ("options", "key"),
    [({"ops": ("/",)}, "ops"), ({"num_operands": 1}, "num_operands"), ({"max_value": 0}, "max_value")],
)
def test_arithmetic_rejects_bad_difficulty(options, key):
    with pytest.raises(ConfigError, match=key):
        generate_arithmetic(4, **options)


# ---- prompts -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_tokenizer():
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", eos_token="<|im_end|>"
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def test_prompt_goes_through_the_chat_template(chat_tokenizer):
    prompt = render_prompt(chat_tokenizer, "What is 2 + 2?")
    assert prompt == (
        f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert "<think>" in SYSTEM_PROMPT and "<answer>" in SYSTEM_PROMPT
    examples = load_gsm8k("sample", "test", limit=2)
    assert render_prompts(chat_tokenizer, examples)[1].count(examples[1].question) == 1


def test_prompt_without_system_prompt():
    assert build_messages("q", system_prompt=None) == [{"role": "user", "content": "q"}]


def test_tokenizer_without_chat_template_is_a_config_error(chat_tokenizer):
    bare = chat_tokenizer.__class__(tokenizer_object=chat_tokenizer.backend_tokenizer, unk_token="<unk>")
    bare.chat_template = None
    with pytest.raises(ConfigError, match="no chat_template"):
        render_prompt(bare, "q")


# ---- batching ----------------------------------------------------------------------------------


def test_batches_cover_each_epoch_once_and_reshuffle():
    batches = ShuffledBatches(list(range(10)), batch_size=3, seed=7)
    epoch0 = [next(batches) for _ in range(batches.batches_per_epoch)]
    epoch1 = [next(batches) for _ in range(batches.batches_per_epoch)]
    flat0, flat1 = sum(epoch0, []), sum(epoch1, [])
    assert len(set(flat0)) == 9 and len(set(flat1)) == 9  # 10 // 3 batches, no repeats in an epoch
    assert flat0 != flat1
    assert batches.state.epoch == 1 and batches.state.position == 9
    assert ShuffledBatches(list(range(10)), batch_size=3, seed=7).__next__() == epoch0[0]


def test_resume_from_saved_state_is_exact():
    items = list(range(23))
    original = ShuffledBatches(items, batch_size=4, seed=1)
    for _ in range(7):  # past the first epoch boundary (5 batches per epoch)
        next(original)
    saved = json.loads(json.dumps(original.state_dict()))  # survives a round trip through a checkpoint file
    expected = [next(original) for _ in range(8)]
    resumed = ShuffledBatches(items, batch_size=4, seed=1)
    resumed.load_state_dict(saved)
    assert [next(resumed) for _ in range(8)] == expected


def test_batches_drawn_counts_every_batch_given_across_epochs():
    """A checkpoint's iterator state says how many batches were drawn (the off-policy resume checks its batches in
    flight by it): 23 items in batches of 4 give 5 per epoch, the last 3 items skipped."""
    batches = ShuffledBatches(list(range(23)), batch_size=4, seed=1)
    counts = [batches_drawn(batches.state_dict())]
    for _ in range(12):
        next(batches)
        counts.append(batches_drawn(json.loads(json.dumps(batches.state_dict()))))
    assert counts == list(range(13))


def test_resume_state_must_match_the_data():
    saved = ShuffledBatches(list(range(10)), batch_size=2, seed=1).state_dict()
    with pytest.raises(CheckpointError, match="num_items"):
        ShuffledBatches(list(range(12)), batch_size=2, seed=1).load_state_dict(saved)
    with pytest.raises(CheckpointError, match="position"):
        ShuffledBatches(list(range(10)), batch_size=2, seed=1).load_state_dict({**saved, "position": 11})


def test_batch_size_must_fit_the_data():
    with pytest.raises(ConfigError, match="batch_size=5"):
        ShuffledBatches([1, 2, 3], batch_size=5)
