"""logger=wandb: a real offline wandb run inside the run directory, next to metrics.jsonl."""

from __future__ import annotations

import json

from tests.conftest import run_cli


def test_wandb_offline_run_lands_in_the_run_dir(tmp_path):
    proc = run_cli(["logger=wandb", "model=qwen3_8b", f"hydra.run.dir={tmp_path}"], env={"WANDB_SILENT": "true"})
    assert proc.returncode == 0, proc.stderr
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    (run_file,) = runs[0].glob("run-*.wandb")
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["status"] == "ok"
    recorded = run_file.read_bytes()  # wandb's own record of the run (protobuf), synced later with `wandb sync`
    assert b"qwen3_8b" in recorded and b"hub_id" in recorded  # the composed config
    assert b"tokens_per_s_per_device" in recorded  # the logged metrics


def test_a_null_wandb_project_is_wandbs_own(tmp_path):
    """logger.wandb.project=null leaves the project to wandb (WANDB_PROJECT here), as wandb.init(project=None) does."""
    proc = run_cli(["logger=wandb", "logger.wandb.project=null", "model=qwen3_8b", f"hydra.run.dir={tmp_path}"],
                   env={"WANDB_SILENT": "true", "WANDB_PROJECT": "from_the_environment"})
    assert proc.returncode == 0, proc.stderr
    (run_file,) = next((tmp_path / "wandb").glob("offline-run-*")).glob("run-*.wandb")
    assert b"from_the_environment" in run_file.read_bytes()


def test_wandb_online_without_an_api_key_is_one_line_naming_the_way_out(tmp_path):
    """wandb.init's UsageError (no key; a project name it refuses) was an internal exception's line, exit 1."""
    proc = run_cli(["logger=wandb", "logger.wandb.mode=online", "model=qwen3_8b", f"hydra.run.dir={tmp_path / 'run'}"],
                   env={"WANDB_API_KEY": "", "NETRC": str(tmp_path / "no_netrc"), "WANDB_CONFIG_DIR": str(tmp_path),
                        "WANDB_SILENT": "true"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: logger.wandb: wandb refuses these settings (mode=online, project='crucible'): No API key configured. "
        "Use `wandb login` to log in.; logger.wandb.mode=offline needs no account (sync later with `wandb sync`)"]
