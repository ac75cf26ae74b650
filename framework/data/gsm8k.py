"""GSM8K loading: from the Hugging Face hub, a local jsonl file or folder, or the sample shipped here.

Every record has `question` and `answer`; the answer ends with `#### <number>`, the reference the
correctness reward compares against. Bad records raise `DataError` naming the file and line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from framework.core.errors import DataError
from framework.data.hub import load_hub_split
from framework.data.records import read_jsonl as read_records

HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"
HUB_WAY_OUT = "use data=gsm8k_sample (shipped with Crucible) or data=gsm8k_local (a local folder)"
SAMPLE_DIR = Path(__file__).parent / "samples" / "gsm8k"
SPLITS = ("train", "test")
ANSWER_MARKER = "####"


@dataclass(frozen=True)
class MathExample:
    """One word problem: the question, the full worked answer and the final reference number."""

    question: str
    answer: str
    reference: str


def extract_reference(answer: str) -> str | None:
    """The text after the last `####` of a GSM8K answer (e.g. "1,200"), or None if it holds no number."""
    if ANSWER_MARKER not in answer:
        return None
    reference = answer.rsplit(ANSWER_MARKER, 1)[1].strip()
    return reference if any(character.isdigit() for character in reference) else None


def example_from_record(record: Any, where: str) -> MathExample:
    """Validate one record (`where` names its file and line for the error message)."""
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object with 'question' and 'answer', got {type(record).__name__}")
    missing = [field for field in ("question", "answer") if not isinstance(record.get(field), str)]
    if missing:
        raise DataError(f"{where}: missing or non-string field(s) {missing}; each record needs 'question' and 'answer'")
    reference = extract_reference(record["answer"])
    if reference is None:
        raise DataError(f"{where}: 'answer' does not end with '{ANSWER_MARKER} <number>'")
    return MathExample(question=record["question"], answer=record["answer"], reference=reference)


def read_jsonl(path: str | Path, limit: int | None = None) -> list[MathExample]:
    """Read GSM8K-format records from one jsonl file (blank lines are skipped)."""
    return read_records(Path(path), example_from_record, limit, kind="GSM8K", expected="'question' and 'answer'")


def load_gsm8k(source: str | Path = HUB_DATASET, split: str = "train", limit: int | None = None) -> list[MathExample]:
    """Load a split of GSM8K.

    `source` is "sample" (the 256 train / 128 test lines shipped with Crucible), a jsonl file, a folder
    holding `<split>.jsonl`, or a hub dataset id (loaded with `datasets.load_dataset(source, "main")`).
    """
    if split not in SPLITS:
        raise DataError(f"GSM8K split '{split}' is unknown; valid splits: {list(SPLITS)}")
    if str(source) == "sample":
        return read_jsonl(SAMPLE_DIR / f"{split}.jsonl", limit)
    path = Path(source).expanduser()
    if path.is_dir():
        return read_jsonl(path / f"{split}.jsonl", limit)
    if path.exists() or looks_like_local_path(str(source)):
        return read_jsonl(path, limit)
    return load_from_hub(str(source), split, limit)


def looks_like_local_path(source: str) -> bool:
    """Paths that must never be sent to the hub, so a typo reports the missing file instead."""
    return source.startswith(("/", ".", "~")) or source.endswith((".jsonl", ".json"))


def load_from_hub(
    dataset_id: str, split: str, limit: int | None = None, cache_dir: str | None = None
) -> list[MathExample]:
    """Load a split from the Hugging Face hub (needs network access, or HF_HUB_OFFLINE=1 and a warm cache)."""
    rows = load_hub_split(dataset_id, split, HUB_WAY_OUT, HUB_CONFIG, cache_dir)
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    return examples_from_rows(rows, f"{dataset_id}:{split}")


def first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def examples_from_rows(rows: Iterable[Any], source_name: str) -> list[MathExample]:
    """Validate in-memory rows (e.g. a `datasets.Dataset`); errors name the row index."""
    return [example_from_record(row, f"{source_name} row {index}") for index, row in enumerate(rows)]
