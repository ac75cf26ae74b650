"""Chat, preference and text data: shipped samples load, the first bad line is named, hub errors are one line."""

import pytest

from framework.core.errors import DataError
from framework.data.records import PreferencePair, RecordSpec, load_records


def spec(fmt, source="sample", path=None, limit=None):
    return RecordSpec(name=fmt, format=fmt, source=source, path=path or fmt, train_limit=limit)


def test_shipped_samples_load_in_every_format():
    chat = load_records(spec("chat"), "train")
    assert len(chat) == 256 and chat[0][-1]["role"] == "assistant"
    pairs = load_records(spec("preference"), "test")
    assert len(pairs) == 128 and isinstance(pairs[0], PreferencePair) and pairs[0].chosen != pairs[0].rejected
    assert len(load_records(spec("text", limit=10), "train")) == 10


@pytest.mark.parametrize("fmt, line, message", [
    ("chat", '{"messages": [{"role": "user", "content": "hi"}]}', "last message must be the assistant"),
    ("chat", '{"messages": [{"role": "bot", "content": "hi"}]}', r"messages\[0\] must be"),
    ("preference", '{"prompt": "q", "chosen": "a"}', "missing field"),
    ("text", '{"text": 3}', "non-empty string"),
    ("text", "{not json", "not valid JSON"),
])
def test_the_first_bad_line_is_named(tmp_path, fmt, line, message):
    good = {"chat": '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
            "preference": '{"prompt": "q", "chosen": "a", "rejected": "b"}', "text": '{"text": "t"}'}[fmt]
    file = tmp_path / "data.jsonl"
    file.write_text(f"{good}\n{line}\n")
    with pytest.raises(DataError, match=rf"data.jsonl:2: .*{message}"):
        load_records(spec(fmt, "local", str(file)), "train")


def test_non_utf8_and_missing_files(tmp_path):
    file = tmp_path / "latin.jsonl"
    file.write_bytes(b'{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        load_records(spec("text", "local", str(file)), "train")
    missing = f"^data.path: {tmp_path}/nope.jsonl: no such file or folder .data.source=local.; valid: a jsonl file"
    with pytest.raises(DataError, match=missing + ", or a folder holding train.jsonl .and test.jsonl.$"):
        load_records(spec("text", "local", str(tmp_path / "nope.jsonl")), "train")
    assert load_records(spec("text", "local", str(file)), "test") == []  # a single file: no test split


def test_a_utf8_bom_is_accepted(tmp_path):
    """Excel and Notepad save UTF-8 with a byte-order mark; the first record loads as if it were not there."""
    file = tmp_path / "bom.jsonl"
    file.write_bytes(b'\xef\xbb\xbf{"text": "caf\xc3\xa9"}\n{"text": "two"}\n')
    assert load_records(spec("text", "local", str(file)), "train") == ["caf\u00e9", "two"]
