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


# Every op class at exactly its roofline (no efficiency factor, no floor): formula tests read times off it.
EXACT = {"op_classes": {name: {"compute": 1.0, "memory": 1.0, "floor_us": 0.0}
                        for name in ("gemm", "attention", "norm", "elementwise", "embedding", "optimizer")}}


def stack_override(tmp_path, monkeypatch, stack: str, field: str):
    """A fixture's body: yields install(value), which replaces `field` of `stack` in sims/stacks.yaml for the
    test (a copy under tmp_path); restored after it."""
    import sims.stacks as stacks_module

    def install(value):
        records = yaml.safe_load(stacks_module.STACKS_FILE.read_text())
        records[stack][field] = value
        path = tmp_path / f"stacks_{len(list(tmp_path.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(records))
        monkeypatch.setattr(stacks_module, "STACKS_FILE", path)
        stacks_module.stacks.cache_clear()

    yield install
    monkeypatch.undo()
    stacks_module.stacks.cache_clear()


def simulated_alone(cfg: dict, hw: dict, layouts: list, workloads: list, **kwargs) -> list[tuple[dict, list]]:
    """(summary, per-op rows) of each layout simulated alone, every cache cleared before it and after the last: what
    simulate_many must reproduce bit for bit."""
    from sims import simulate
    from sims.cache import clear_caches

    alone = []
    for layout, workload in zip(layouts, workloads):
        clear_caches()
        result = simulate(cfg, hw, layout, workload, **kwargs)
        alone.append((result.summary(), result.breakdown_rows()))
    clear_caches()
    return alone
