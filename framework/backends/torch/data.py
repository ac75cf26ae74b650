"""Records of framework.data as the conversational datasets TRL's trainers take."""

from __future__ import annotations

from framework.core.errors import DataError
from framework.data.records import PreferencePair


def sft_rows(conversations: list[list[dict]], completion_only: bool, where: str) -> list[dict]:
    """completion_only: prompt = every turn before the last assistant turn, completion = that turn (TRL's
    prompt-completion format: the loss covers the completion only, with any chat template). Else the whole
    conversation is the target (language modelling)."""
    if not completion_only:
        return [{"messages": messages} for messages in conversations]
    rows = []
    for index, messages in enumerate(conversations):
        if len(messages) < 2:
            raise DataError(f"{where} record {index + 1}: only an assistant turn; completion_only_loss needs a prompt "
                            f"before it (or set sft.completion_only_loss=false)")
        rows.append({"prompt": messages[:-1], "completion": messages[-1:]})
    return rows


def dpo_rows(pairs: list[PreferencePair]) -> list[dict]:
    return [{"prompt": pair.prompt, "chosen": [{"role": "assistant", "content": pair.chosen}],
             "rejected": [{"role": "assistant", "content": pair.rejected}]} for pair in pairs]


def as_dataset(rows: list[dict]):
    import datasets

    return datasets.Dataset.from_list(rows)
