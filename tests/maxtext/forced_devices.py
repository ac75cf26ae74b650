"""Run a test module's own `__main__` checks in a subprocess that sees N forced host (CPU) devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO_ROOT


def facts_on_cpu_devices(script: str, devices: int, *args: str, timeout: float) -> dict:
    """Runs `python script *args` with `devices` CPU devices; returns the JSON of its last stdout line.
    Unoptimised CPU code generation: these programs run once, so compile time is what counts."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices} --xla_backend_optimization_level=0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, script, *args], env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
