"""Backend-neutral data sets for SFT (chat), DPO (preference pairs) and pretraining (text).

Each format is jsonl, one object per line, read from a shipped sample, a local file or folder
(`train.jsonl`, `test.jsonl`), or the hub (`datasets.load_dataset`). Every record is validated before
any model is built; the first bad line is a DataError naming the file, the line and what is expected.

    chat        {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}  (ends with assistant)
    preference  {"prompt": str | [messages], "chosen": str, "rejected": str}
    text        {"text": str}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Optional

from framework.core.errors import DataError
from framework.core.ranges import Count
from framework.data.hub import load_hub_split

SAMPLES = Path(__file__).parent / "samples"
ROLES = ("system", "user", "assistant")
RecordFormat = Literal["chat", "preference", "text"]


@dataclass
class RecordSpec:
    """The `data` group of the chat, preference and text formats."""

    name: str
    format: RecordFormat
    source: Literal["hub", "local", "sample"]
    path: Optional[str]  # sample: a folder under framework/data/samples; local: a jsonl file or folder; hub: id
    train_limit: Optional[Count]  # only the first N training records; null = all


@dataclass(frozen=True)
class PreferencePair:
    prompt: list[dict]  # chat messages before the answer (a plain-string prompt becomes one user turn)
    chosen: str
    rejected: str


def _check_messages(messages: Any, where: str, field: str = "messages") -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: '{field}' must be a non-empty list of {{role, content}} objects")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise DataError(f"{where}: {field}[{index}] must be {{\"role\": one of {list(ROLES)}, \"content\": str}}")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def chat_record(record: Any, where: str) -> list[dict]:
    if not isinstance(record, dict) or "messages" not in record:
        raise DataError(f"{where}: expected {{\"messages\": [...]}} (chat format)")
    messages = _check_messages(record["messages"], where)
    if messages[-1]["role"] != "assistant":
        raise DataError(f"{where}: the last message must be the assistant's (the target of SFT)")
    return messages


def preference_record(record: Any, where: str) -> PreferencePair:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected an object with 'prompt', 'chosen' and 'rejected'")
    missing = [k for k in ("prompt", "chosen", "rejected") if k not in record]
    if missing:
        raise DataError(f"{where}: missing field(s) {missing}; each record needs 'prompt', 'chosen' and 'rejected'")
    prompt = record["prompt"]
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    prompt = _check_messages(prompt, where, "prompt")
    for key in ("chosen", "rejected"):
        if not isinstance(record[key], str) or not record[key]:
            raise DataError(f"{where}: '{key}' must be a non-empty string (the assistant's answer)")
    return PreferencePair(prompt, record["chosen"], record["rejected"])


def text_record(record: Any, where: str) -> str:
    if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not record["text"].strip():
        raise DataError(f"{where}: expected {{\"text\": non-empty string}}")
    return record["text"]


PARSERS: dict[str, Callable[[Any, str], Any]] = {"chat": chat_record, "preference": preference_record,
                                                 "text": text_record}


def read_jsonl(path: Path, parse: Callable[[Any, str], Any], limit: int | None = None, kind: str = "",
               expected: str = "") -> list:
    """`parse(record, "file:line")` of every non-blank line (the first `limit`); DataErrors name the file and line.
    `kind` ("GSM8K") and `expected` (what a record holds) make the messages of a missing or empty file specific."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such {kind + ' ' if kind else ''}jsonl file")
    records = []
    try:
        with path.open(encoding="utf-8-sig") as lines:  # -sig: Excel and Notepad save JSONL with a BOM
            for number, line in enumerate(lines, start=1):
                if limit is not None and len(records) >= limit:
                    break
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}:{number}: not valid JSON ({error.msg}); expected one object per line") from None
                records.append(parse(record, f"{path}:{number}"))
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text (byte {error.start}); save the file as UTF-8") from None
    if not records:
        raise DataError(f"{path}: no records" + (f"; expected jsonl lines with {expected}" if expected else ""))
    return records


def split_file(spec: RecordSpec, split: str) -> Path | None:
    """The jsonl file of `split`; None when a single-file data set has no test split."""
    if spec.source == "sample":
        return SAMPLES / str(spec.path) / f"{split}.jsonl"
    path = Path(str(spec.path)).expanduser()
    if path.is_dir():
        file = path / f"{split}.jsonl"
        return file if split == "train" or file.is_file() else None
    return path if split == "train" else None


def source_name(spec: RecordSpec, split: str = "train") -> str:
    """The file (or hub id) `split` is read from, for messages."""
    return f"{spec.path}:{split}" if spec.source == "hub" else str(split_file(spec, split))


def load_records(spec: RecordSpec, split: str = "train", limit: int | None = None) -> list:
    """Validated records of `split` ("train" or "test"): messages lists, PreferencePairs or strings."""
    if split not in ("train", "test"):
        raise DataError(f"split {split!r} is unknown; valid: train, test")
    parse = PARSERS[spec.format]
    limit = spec.train_limit if split == "train" and limit is None else limit
    check_path(spec)
    if spec.source == "hub":
        return _load_hub(str(spec.path), split, parse, limit)
    file = split_file(spec, split)
    if file is None:
        return []
    return read_jsonl(file, parse, limit)


def check_path(spec: RecordSpec) -> None:
    """data.path names a shipped sample, a local file or folder, or a hub id; a missing one was `None: no such jsonl
    file` (or the recipe's sample name taken as a local file), naming no key."""
    if spec.path is None:
        needs = {"local": "a jsonl file, or a folder holding train.jsonl (and test.jsonl)",
                 "sample": "a folder under framework/data/samples", "hub": "a data set id"}[spec.source]
        raise DataError(f"data.path: null; data.source={spec.source} needs {needs}")
    if spec.source == "sample" and not (SAMPLES / str(spec.path)).is_dir():
        samples = sorted(p.name for p in SAMPLES.iterdir() if (p / "train.jsonl").is_file())
        raise DataError(f"data.path: {spec.path!r} is not a shipped sample; valid: one of {samples}")
    if spec.source == "local" and not Path(str(spec.path)).expanduser().exists():
        raise DataError(f"data.path: {spec.path}: no such file or folder (data.source=local); valid: a jsonl file, "
                        f"or a folder holding train.jsonl (and test.jsonl)")


def _load_hub(dataset_id: str, split: str, parse: Callable[[Any, str], Any], limit: int | None) -> list:
    rows = load_hub_split(dataset_id, split, "use a local jsonl file or folder (data.source=local data.path=...)")
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    return [parse(dict(row), f"{dataset_id}:{split} row {index}") for index, row in enumerate(rows)]


def render_messages(messages: Iterable[dict]) -> str:
    """A plain transcript of messages (for tokenizers without a chat template)."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)
