"""Token ids and masks from chats and preference pairs (as TRL tokenises them), padding, data order.

Rendering goes through the tokenizer's chat template, tokenised by transformers' apply_chat_template
as TRL 1.16 does: a completion starts where the rendered prompt (with the generation prompt) and the
rendered prompt + answer stop sharing tokens (TRL's common-prefix rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from framework.data.records import PreferencePair

PAD_MULTIPLE = 16  # sequence lengths rounded up: few distinct shapes, so mx.compile traces few times


def chat_ids(tokenizer, messages: list[dict], add_generation_prompt: bool = False) -> list[int]:
    out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=add_generation_prompt)
    return list(out["input_ids"])


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def encode_chat(tokenizer, messages: list[dict], max_length: int, assistant_only: bool) -> dict:
    """{"ids", "mask"}: mask 1 on the tokens of every assistant turn (or on all tokens)."""
    ids = chat_ids(tokenizer, messages)
    mask = [0 if assistant_only else 1] * len(ids)
    if assistant_only:
        for turn, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            prompt = chat_ids(tokenizer, messages[:turn], add_generation_prompt=True)
            through = chat_ids(tokenizer, messages[:turn + 1])
            start = common_prefix_length(prompt, through)
            mask[start:len(through)] = [1] * (len(through) - start)
    return {"ids": ids[:max_length], "mask": mask[:max_length]}


def encode_pair(tokenizer, pair: PreferencePair, max_prompt: int, max_completion: int) -> dict:
    """{"prompt", "chosen", "rejected"} token ids; the prompt keeps its end, completions their start."""
    prompt = chat_ids(tokenizer, pair.prompt, add_generation_prompt=True)
    chosen = chat_ids(tokenizer, pair.prompt + [{"role": "assistant", "content": pair.chosen}])
    rejected = chat_ids(tokenizer, pair.prompt + [{"role": "assistant", "content": pair.rejected}])
    start = min(common_prefix_length(prompt, chosen), common_prefix_length(prompt, rejected))
    return {"prompt": prompt[:start][-max_prompt:], "chosen": chosen[start:][:max_completion],
            "rejected": rejected[start:][:max_completion]}


def pad(rows: list[list[int]], value: int, length: int) -> np.ndarray:
    out = np.full((len(rows), length), value, dtype=np.int32)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    return out


def padded_length(rows: list[list[int]]) -> int:
    longest = max(len(r) for r in rows)
    return -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE


def collate_chats(examples: list[dict], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, loss mask) [B, L], right-padded."""
    length = padded_length([e["ids"] for e in examples])
    return pad([e["ids"] for e in examples], pad_id, length), pad([e["mask"] for e in examples], 0, length)


def collate_pairs(examples: list[dict], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, completion mask) [2B, L]: prompt+chosen rows, then prompt+rejected rows (TRL's layout)."""
    rows, masks = [], []
    for side in ("chosen", "rejected"):
        for e in examples:
            rows.append(e["prompt"] + e[side])
            masks.append([0] * len(e["prompt"]) + [1] * len(e[side]))
    length = padded_length(rows)
    return pad(rows, pad_id, length), pad(masks, 0, length)


@dataclass
class DataCursor:
    """Where training is in its data: epoch e visits the examples in a seeded permutation of (seed, e)."""

    size: int
    seed: int
    epoch: int = 0
    index: int = 0

    def take(self, count: int) -> list[int]:
        taken = []
        while len(taken) < count:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
            chunk = order[self.index:self.index + count - len(taken)].tolist()
            taken += chunk
            self.index += len(chunk)
            if self.index >= self.size:
                self.epoch, self.index = self.epoch + 1, 0
        return taken

    def state(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "size": self.size}
