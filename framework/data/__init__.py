"""Backend-neutral data: math problems (framework/data/math.py), chat, preference pairs and text
(framework/data/records.py). Every `conf/data/*.yaml` names its `format`; a task takes one format.

    spec = data_spec(cfg.data, "dpo")   # a RecordSpec of format preference, or a one-line ConfigError
    check_data(spec)                    # path, fields, encoding, first bad line: before any model is built
"""

from __future__ import annotations

from typing import Any

from framework.core.errors import ConfigError

# which data format each task reads
TASK_FORMATS = {"grpo": "math", "sft": "chat", "dpo": "preference", "pretrain": "text"}
FORMAT_WORDS = {"math": "a math (question/answer)", "chat": "a chat (messages)",
                "preference": "a preference (prompt/chosen/rejected)", "text": "a text"}


def data_options(data_format: str) -> list[str]:
    """The conf/data options of `data_format`."""
    import yaml

    from framework.core.paths import CONF_DIR

    options = []
    for path in sorted((CONF_DIR / "data").glob("*.yaml")):
        node = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if node.get("format") == data_format:
            options.append(path.stem)
    return options


def data_spec(cfg_data: Any, task: str):
    """The typed spec of the `data` group for `task` (MathSpec or RecordSpec), after checking that the
    data set's format is the one the task reads; the error names data=... and the valid options."""
    from framework.core.build import build
    from framework.core.plain import to_plain

    wanted = TASK_FORMATS.get(task)
    if wanted is None:
        raise ConfigError(f"task={task} reads no data set; valid tasks with data: {', '.join(TASK_FORMATS)}")
    data = to_plain(cfg_data) or {}
    name, got = data.get("name"), data.get("format")
    if got != wanted:
        what = "no data set" if got is None else f"{got} data"
        raise ConfigError(f"data={name}: task={task} needs {FORMAT_WORDS[wanted]} data set, got {what}; choose "
                          f"data={', data='.join(data_options(wanted))}")
    if wanted == "math":
        from framework.data.math import MathSpec, check_arithmetic_node

        check_arithmetic_node(data)
        spec = build(MathSpec, data, "data")
        spec.check()
        return spec
    from framework.data.records import RecordSpec

    return build(RecordSpec, data, "data")


def check_data(spec) -> None:
    """Read both splits once, so a missing file, a bad field or encoding, or a bad line (with its number)
    stops the run before any model is built."""
    from framework.data.math import MathSpec

    if isinstance(spec, MathSpec):
        from framework.data.math import load_split, train_examples

        train_examples(spec)
        load_split(spec, "test")
        return
    from framework.data.records import load_records

    load_records(spec, "train")
    load_records(spec, "test")
