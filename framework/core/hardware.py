"""`hardware=auto`: which hardware file describes this machine, and whether it has what a file asks for.

Detection is cheap and imports no heavy library: `nvidia-smi` / `rocm-smi` name queries with a short
timeout, `/dev/accel*` or the TPU runtime's environment for TPUs, `platform` for Apple silicon.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from framework.core.errors import ConfigError

log = logging.getLogger(__name__)
QUERY_TIMEOUT_S = 3
# Substrings of a device name -> hardware file (conf/hardware/<name>.yaml); first match wins.
GPU_FILES = (("H200", "h200"), ("H100", "h100"), ("A100", "a100"), ("MI300X", "mi300x"), ("MI300", "mi300x"))
TPU_FILES = (("v5p", "tpu_v5p"), ("v5lite", "tpu_v5e"), ("v5e", "tpu_v5e"))
FALLBACK = {"gpu": "h100", "tpu": "tpu_v5e"}  # a device we have no file for: the closest figures, with a warning


@dataclass(frozen=True)
class Detected:
    option: str  # the hardware file chosen
    accelerator: str  # gpu | tpu | mps | cpu
    found: str  # what the machine reported, for the log line and summary.json

    def describe(self) -> str:
        return f"hardware=auto chose {self.option} (found: {self.found})"


def _query(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        return ""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def gpu_names() -> list[str]:
    names = _query(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
    if not names:  # AMD: lines like "GPU[0] : Card Series: AMD Instinct MI300X"
        names = [line.split(":")[-1].strip() for line in _query(["rocm-smi", "--showproductname"]).splitlines()
                 if "Card Series" in line or "Card SKU" in line]
    return [n.strip() for n in names if n.strip()]


def tpu_type() -> str | None:
    """The TPU type ('v5p-8', 'v5litepod-8') from the TPU runtime's environment, '' for an unnamed
    TPU (/dev/accel* exists), None without a TPU."""
    for name in ("TPU_ACCELERATOR_TYPE", "ACCELERATOR_TYPE", "TPU_NAME"):
        if os.environ.get(name):
            return os.environ[name]
    return "" if list(Path("/dev").glob("accel*")) else None


def _pick(name: str, table: tuple[tuple[str, str], ...], kind: str) -> str:
    for needle, option in table:
        if needle.lower() in name.lower():
            return option
    log.warning("hardware=auto: no hardware file for %s %r; using %s's figures", kind, name, FALLBACK[kind])
    return FALLBACK[kind]


@functools.lru_cache(maxsize=1)
def detect() -> Detected:
    """The hardware file that describes this machine (cached: one query per process)."""
    gpus = gpu_names()
    if gpus:
        return Detected(_pick(gpus[0], GPU_FILES, "gpu"), "gpu", f"{len(gpus)} x {gpus[0]}")
    tpu = tpu_type()
    if tpu is not None:
        return Detected(_pick(tpu, TPU_FILES, "tpu"), "tpu", f"TPU {tpu or '(type unknown)'}")
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        return Detected("m2_ultra", "mps", f"Apple silicon ({platform.machine()})")
    return Detected("cpu", "cpu", "no GPU or TPU")


def require_accelerator(hardware_cfg) -> None:
    """ConfigError (one line) when the hardware file asks for an accelerator this machine lacks.

    Backends that run on the device call it in prepare_backend; the simulator never does (simulating
    an H100 on a laptop is its purpose)."""
    wanted = hardware_cfg["accelerator"]
    if wanted == "cpu":
        return
    found = detect()
    if found.accelerator == wanted:
        return
    raise ConfigError(f"hardware={hardware_cfg['name']} asks for a {wanted} ({hardware_cfg['device_name']}); this "
                      f"machine has {found.found}: use hardware=auto (here: {found.option}) or a matching file")


AUTO = "auto"


def _package_header(text: str) -> str | None:
    """The `# @package X` line of a config file's header, if any."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return None
        if stripped.startswith("# @package"):
            return stripped.split()[-1]
    return None


def register_auto(conf_dir: Path | None = None) -> Detected:
    """Register `hardware=auto` in Hydra's ConfigStore: a copy of the detected file, package included."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from framework.core.paths import CONF_DIR

    found = detect()
    path = (conf_dir or CONF_DIR) / "hardware" / f"{found.option}.yaml"
    text = path.read_text(encoding="utf-8")
    ConfigStore.instance().store(group="hardware", name=AUTO, node=OmegaConf.create(text),
                                 package=_package_header(text), provider="crucible")
    return found
