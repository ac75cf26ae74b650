"""The outcome of one run, the same for every task; saved in the run's summary.json."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class TrainingResult:
    success: bool
    metrics: dict = field(default_factory=dict)  # final metrics, JSON-serialisable scalars
    wall_time_s: float = 0.0
    samples: int = 0  # samples (sequences, prompts x generations, configurations...) processed
    artifacts: dict[str, str] = field(default_factory=dict)  # name -> path (checkpoints, exports, tables)
    error: str | None = None
    status: str = "ok"  # ok | failed | invalid (an input the task reports as a row, e.g. an impossible layout)
    # | refused (a resume the run dir's checkpoints do not allow, a live run dir; nothing was written)
    # | interrupted (SIGINT/SIGTERM; the trainer checkpointed first when it handles stop requests)
    warnings: list[str] = field(default_factory=list)  # shown in the closing summary, e.g. a layout that does not fit

    def to_dict(self) -> dict:
        return asdict(self)
