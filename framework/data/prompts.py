"""Prompts for reasoning RL and a seeded, resumable batch iterator.

The system prompt asks for `<think>...</think><answer>...</answer>`, the structure the `format`,
`tag_count` and `correctness` rewards in `framework.rl.rewards` look for. Prompts are rendered
with the model's own chat template, ending with the generation prompt, as plain strings: each
backend tokenizes them itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Generic, Sequence, TypeVar

import numpy as np

from framework.core.errors import CheckpointError, ConfigError
from framework.data.gsm8k import MathExample

SYSTEM_PROMPT = (
    "You are a careful math tutor. First think through the problem step by step inside "
    "<think> </think> tags, then give only the final number inside <answer> </answer> tags, "
    "like this: <think> reasoning here </think><answer> 42 </answer>"
)

Item = TypeVar("Item")


def build_messages(question: str, system_prompt: str | None = SYSTEM_PROMPT) -> list[dict[str, str]]:
    """Chat messages: the system prompt (if any), then the question as the user turn."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return messages + [{"role": "user", "content": question}]


def render_prompt(tokenizer: Any, question: str, system_prompt: str | None = SYSTEM_PROMPT) -> str:
    """The prompt text the model continues: chat template applied, generation prompt appended."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)!r} has no chat_template; "
            "use an instruct/chat model's tokenizer or set tokenizer.chat_template"
        )
    return tokenizer.apply_chat_template(
        build_messages(question, system_prompt), add_generation_prompt=True, tokenize=False
    )


def render_prompts(
    tokenizer: Any, examples: Sequence[MathExample], system_prompt: str | None = SYSTEM_PROMPT
) -> list[str]:
    return [render_prompt(tokenizer, example.question, system_prompt) for example in examples]


@dataclass
class IteratorState:
    """Where a `ShuffledBatches` stands: the epoch and the index of the next item in its order."""

    epoch: int = 0
    position: int = 0


def batches_drawn(state: dict[str, int]) -> int:
    """How many batches the iterator whose `state_dict()` this is has given since it started: a batch never spans
    two epochs, so each finished epoch gave num_items // batch_size."""
    return state["epoch"] * (state["num_items"] // state["batch_size"]) + state["position"] // state["batch_size"]


class ShuffledBatches(Generic[Item]):
    """An endless iterator of batches, reshuffled each epoch; seeded and resumable exactly.

    Epoch e visits items in the permutation drawn from `numpy.random.default_rng([seed, e])`, so
    the order depends only on (seed, epoch) and the saved state is just (epoch, position). A batch
    never spans two epochs: the last `len(items) % batch_size` items of an epoch's order are
    skipped, and they differ from epoch to epoch.
    """

    def __init__(self, items: Sequence[Item], batch_size: int, seed: int = 0, state: IteratorState | None = None):
        if batch_size < 1 or batch_size > len(items):
            raise ConfigError(f"batch_size={batch_size}: must be between 1 and the number of examples ({len(items)})")
        self.items = items
        self.batch_size = batch_size
        self.seed = seed
        self.state = state or IteratorState()
        self._order_epoch = -1
        self._order = np.arange(0)

    @property
    def batches_per_epoch(self) -> int:
        return len(self.items) // self.batch_size

    def epoch_order(self, epoch: int) -> np.ndarray:
        if epoch != self._order_epoch:
            self._order = np.random.default_rng([self.seed, epoch]).permutation(len(self.items))
            self._order_epoch = epoch
        return self._order

    def __iter__(self) -> ShuffledBatches[Item]:
        return self

    def __next__(self) -> list[Item]:
        if self.state.position + self.batch_size > len(self.items):
            self.state = IteratorState(epoch=self.state.epoch + 1, position=0)
        start = self.state.position
        indices = self.epoch_order(self.state.epoch)[start : start + self.batch_size]
        self.state = IteratorState(epoch=self.state.epoch, position=start + self.batch_size)
        return [self.items[index] for index in indices]

    def state_dict(self) -> dict[str, int]:
        """Everything needed to resume; the data set size, batch size and seed are checked on load."""
        return {**asdict(self.state), "seed": self.seed, "num_items": len(self.items), "batch_size": self.batch_size}

    def load_state_dict(self, saved: dict[str, int]) -> None:
        expected = {"seed": self.seed, "num_items": len(self.items), "batch_size": self.batch_size}
        saved_setup = {key: saved.get(key) for key in expected}
        if saved_setup != expected:
            raise CheckpointError(f"data iterator state was saved for {saved_setup}, but this run has {expected}")
        if not 0 <= saved["position"] <= len(self.items) or saved["epoch"] < 0:
            raise CheckpointError(
                f"data iterator state epoch={saved['epoch']} position={saved['position']}: "
                f"need epoch >= 0 and 0 <= position <= {len(self.items)}"
            )
        self.state = IteratorState(epoch=int(saved["epoch"]), position=int(saved["position"]))
