"""framework.data.data_spec: each task gets the spec type of its data format, or one line naming data=... options."""

from __future__ import annotations

import pytest
import yaml

from framework.core.errors import ConfigError, DataError
from framework.data import TASK_FORMATS, check_data, data_options, data_spec
from framework.data.math import MathSpec
from framework.data.records import RecordSpec
from tests.conftest import CONF_DIR, compose_config


def test_every_data_option_names_its_format():
    for path in sorted((CONF_DIR / "data").glob("*.yaml")):
        node = yaml.safe_load(path.read_text())
        assert "format" in node and node["format"] in (None, "math", "chat", "preference", "text"), path.name
    assert data_options("preference") == ["preference_sample"]
    assert set(data_options("math")) >= {"gsm8k", "gsm8k_sample", "arithmetic"}


@pytest.mark.parametrize("task,data,spec_type", [("grpo", "gsm8k_sample", MathSpec), ("sft", "chat_sample", RecordSpec),
                                                 ("dpo", "preference_sample", RecordSpec),
                                                 ("pretrain", "text_sample", RecordSpec)])
def test_each_task_gets_its_spec_and_the_data_validates(task, data, spec_type):
    spec = data_spec(compose_config([f"data={data}"]).data, task)
    assert isinstance(spec, spec_type) and spec.format == TASK_FORMATS[task]
    check_data(spec)


def test_wrong_format_or_no_data_is_one_line_naming_the_options():
    with pytest.raises(ConfigError) as error:
        data_spec(compose_config(["data=chat_sample"]).data, "dpo")
    assert str(error.value) == ("data=chat_sample: task=dpo needs a preference (prompt/chosen/rejected) data set, got "
                                "chat data; choose data=preference_sample")
    with pytest.raises(ConfigError, match="data=none: task=pretrain needs a text data set, got no data set; choose "
                                          "data=text_sample"):
        data_spec(compose_config(["data=none"]).data, "pretrain")


def test_a_bad_line_in_a_local_preference_file_names_its_number(tmp_path):
    bad = tmp_path / "pairs.jsonl"
    bad.write_text('{"prompt": "2+2?", "chosen": "4", "rejected": "5"}\n{"prompt": "3+3?", "chosen": "6"}\n')
    cfg = compose_config(["data=preference_sample", "data.source=local", f"data.path={bad}"])
    with pytest.raises(DataError, match=rf"{bad}:2: missing field\(s\) \['rejected'\]"):
        check_data(data_spec(cfg.data, "dpo"))
