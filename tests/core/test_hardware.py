"""hardware=auto: the device's name picks the hardware file; a file asking for a missing accelerator is one line."""

from __future__ import annotations

import os
import stat

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from framework.core import hardware
from framework.core.errors import ConfigError
from tests.conftest import compose_config, run_cli


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A fake nvidia-smi / rocm-smi on PATH (the real query path runs); detection cache cleared."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for name in ("TPU_ACCELERATOR_TYPE", "ACCELERATOR_TYPE", "TPU_NAME"):
        monkeypatch.delenv(name, raising=False)

    def with_tool(tool: str, output: str) -> None:
        script = bin_dir / tool
        script.write_text(f"#!/bin/sh\ncat <<'END'\n{output}\nEND\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)

    hardware.detect.cache_clear()
    yield with_tool
    hardware.detect.cache_clear()


@pytest.mark.parametrize("tool,output,option", [
    ("nvidia-smi", "NVIDIA H100 80GB HBM3\nNVIDIA H100 80GB HBM3", "h100"),
    ("nvidia-smi", "NVIDIA H200", "h200"),
    ("nvidia-smi", "NVIDIA A100-SXM4-80GB", "a100"),
    ("rocm-smi", "GPU[0]\t\t: Card Series: \t\tAMD Instinct MI300X OAM", "mi300x"),
])
def test_the_gpu_name_picks_the_file(machine, tool, output, option):
    machine(tool, output)
    found = hardware.detect()
    assert (found.option, found.accelerator) == (option, "gpu")
    assert found.describe().startswith(f"hardware=auto chose {option} (found: ")


def test_a_tpu_is_found_from_its_runtime_environment(machine, monkeypatch):
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v5p-8")
    assert hardware.detect() == hardware.Detected("tpu_v5p", "tpu", "TPU v5p-8")


def test_an_unknown_gpu_uses_the_closest_file_with_a_warning(machine, caplog):
    machine("nvidia-smi", "NVIDIA L4")
    assert hardware.detect().option == "h100"
    assert "no hardware file for gpu 'NVIDIA L4'" in caplog.text


def test_this_machine_composes_as_auto():
    """auto is the default hardware of every task that runs here; the simulator's targets an h100."""
    hardware.detect.cache_clear()
    assert compose_config(["task=grpo"]).hardware.name == hardware.detect().option
    assert compose_config([]).hardware.name == "h100"


def test_auto_copies_the_detected_file_whatever_its_package(tmp_path, machine):
    """A hardware file in `# @package _global_` form (hardware: and parallel: nodes) keeps working."""
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "cpu.yaml").write_text(
        "# @package _global_\n# a comment\nhardware:\n  name: cpu\n  accelerator: cpu\nparallel: {dp: 1, tp: 1}\n")
    (tmp_path / "config.yaml").write_text("defaults:\n  - hardware: auto\n  - _self_\n")
    hardware.register_auto(conf_dir=tmp_path)
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = compose("config")
    assert OmegaConf.to_container(cfg) == {"hardware": {"name": "cpu", "accelerator": "cpu"},
                                           "parallel": {"dp": 1, "tp": 1}}
    hardware.register_auto()  # back to the repository's files for the other tests


def test_a_missing_accelerator_is_one_line_naming_both(machine):
    h100 = compose_config(["hardware=h100"]).hardware
    with pytest.raises(ConfigError) as error:
        hardware.require_accelerator(h100)
    assert str(error.value) == ("hardware=h100 asks for a gpu (NVIDIA H100 SXM5 80GB); this machine has no GPU or "
                                "TPU: use hardware=auto (here: cpu) or a matching file")
    hardware.require_accelerator(compose_config(["hardware=cpu"]).hardware)  # cpu is always there


@pytest.mark.skipif(hardware.detect().accelerator != "cpu", reason="needs a machine without GPU or TPU")
def test_the_headline_command_on_a_cpu_machine_ends_in_the_accelerator_line(tmp_path):
    proc = run_cli(["backend=maxtext", "task=grpo", "hardware=h100", f"hydra.run.dir={tmp_path}"],
                   env={"JAX_PLATFORMS": ""})
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: hardware=h100 asks for a gpu") and "AssertionError" not in proc.stderr
    assert len([line for line in lines if line.startswith("error:")]) == 1
