"""Model and hardware dicts straight from the repository's config groups (importable: tests/sims is on sys.path)."""

from pathlib import Path

import yaml

from sims.hardware import read_hardware_file

REPO = Path(__file__).resolve().parents[2]
MODELS = (
    "qwen3_30b_a3b",
    "qwen3_235b_a22b",
    "deepseek_v3",
    "qwen3_8b",
    "llama3_1_8b",
    "qwen2_5_7b",
    "qwen2_5_0_5b_instruct",
)


def model_config(name: str) -> dict:
    return yaml.safe_load((REPO / f"conf/model/{name}.yaml").read_text())["hf_config"]


def hardware(name: str, **overrides) -> dict:
    return {**read_hardware_file(REPO / f"conf/hardware/{name}.yaml"), **overrides}
