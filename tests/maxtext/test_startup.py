"""The GRPO trainer's start-up (trainers/startup.py): the model built in the background while the first step
compiles trains exactly as a model built beforehand, and the weights reach the devices only after every
background compile has ended (XLA autotunes with nothing lasting on the device; trainers/aot.py says why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from framework.core.errors import ConfigError
from framework.core.loggers import read_metrics
from framework.core.paths import CONF_DIR, REPO_ROOT
from framework.models.tiny import resolve_model_dir
from tests.conftest import run_cli

pytest.importorskip("jax")

RUN = ["recipe=grpo_gsm8k_cpu", "grpo.steps=1", "grpo.eval.every=0", "grpo.checkpoint.every=1",
       "grpo.export_hf=false", "progress=false"]
TIMINGS = ("time_s", "_per_s", "compile", "aot", "startup", "model_")


def _run(tmp_path, name, cache):
    run_dir = tmp_path / name
    proc = run_cli([*RUN, f"hydra.run.dir={run_dir}"], env={"CRUCIBLE_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())["result"]["metrics"]
    manifest = json.loads((run_dir / "checkpoints" / "step_1" / "manifest.json").read_text())
    manifest.pop("created", None)
    rows = [{k: v for k, v in row.items() if not any(t in k for t in TIMINGS)}
            for row in read_metrics(run_dir / "metrics.jsonl")]
    return rows, summary, manifest


@pytest.mark.slow
def test_background_build_trains_as_a_prebuilt_model_and_weights_are_placed_after_the_compiles(tmp_path):
    model = yaml.safe_load((CONF_DIR / "model" / "tiny_qwen2.yaml").read_text())
    resolve_model_dir(model, tmp_path / "prebuilt" / "models")  # the synchronous build, as other backends do
    rows_before, summary_before, files_before = _run(tmp_path, "prebuilt_run", tmp_path / "prebuilt")
    rows_during, summary_during, files_during = _run(tmp_path, "background_run", tmp_path / "empty")

    assert rows_during == rows_before and files_during == files_before  # metrics, params, optimizer state, RNG
    assert summary_before["model_ready_s"] == 0.0 < summary_during["model_ready_s"]
    for summary in (summary_before, summary_during):
        assert summary["aot_fallbacks"] == 0
        # the last background compile ended before the placement of the weights began
        assert summary["startup_compiles_end_s"] <= summary["startup_place_start_s"]
        assert summary["startup_host_read_s"] > 0 and summary["startup_place_s"] > 0


def test_a_failing_background_build_is_one_line_and_a_non_zero_exit_with_nothing_published(tmp_path):
    proc = run_cli([*RUN, "model.hf_config.vocab_size=100", f"hydra.run.dir={tmp_path / 'run'}"],
                   env={"CRUCIBLE_CACHE": str(tmp_path / "cache")})
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: model.hf_config.vocab_size: 100 is too small for a byte-level tokenizer (needs >= 259)"]
    assert "Traceback" not in proc.stderr
    models = tmp_path / "cache" / "models"
    assert not [p.name for p in models.iterdir()] if models.exists() else True  # no model, metadata or staging


# run.py in this process, then the heavy modules it imported (the tiny model's build runs in a child of its own)
RUN_AND_LIST_IMPORTS = """import runpy, sys
sys.path.insert(0, {root!r})
sys.argv = ["run.py", *sys.argv[1:]]
try:
    runpy.run_path("run.py", run_name="__main__")
except SystemExit as stop:
    assert not stop.code, stop.code
print(sorted({{"transformers", "torch", "huggingface_hub"}} & set(sys.modules)))
"""


@pytest.mark.slow
def test_a_grpo_run_imports_neither_transformers_nor_torch(tmp_path):
    code = RUN_AND_LIST_IMPORTS.format(root=str(REPO_ROOT))
    args = [*RUN, "grpo.checkpoint.every=0", f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "CRUCIBLE_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_eos_ids_are_the_tokenizers_and_generation_config_jsons(tmp_path):
    from framework.backends.maxtext.trainers.rollout import eos_token_ids

    class Tokenizer:
        eos_token_id = 2

    assert eos_token_ids(Tokenizer, tmp_path) == [2]  # no generation_config.json
    for configured, expected in (([2, 0], [0, 2]), (5, [2, 5]), (None, [2])):
        (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": configured}))
        assert eos_token_ids(Tokenizer, tmp_path) == expected
    (tmp_path / "generation_config.json").write_text("[1]")
    with pytest.raises(ConfigError, match="generation_config.json: not a JSON object"):
        eos_token_ids(Tokenizer, tmp_path)
    for bad in ([[1]], "3", [1.5], -1):
        (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": bad}))
        with pytest.raises(ConfigError, match="eos_token_id .* must be a token id or a list of token ids"):
            eos_token_ids(Tokenizer, tmp_path)
