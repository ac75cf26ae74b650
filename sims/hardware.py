"""A device and its links, read from the dict of a `conf/hardware/*.yaml` file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from framework.core.errors import ConfigError
from sims.calibration.table import DTYPES, EfficiencyTable, load_table
from sims.plain import json_key
from sims.stacks import DEFAULT_STACK, stack

REPO_ROOT = Path(__file__).resolve().parents[1]
REQUIRED = ("name", "devices_per_node", "nodes", "memory_gb", "peak_tflops", "hbm_tb_s")


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    devices_per_node: int
    nodes: int
    memory_gb: float
    peak_tflops: dict[str, float | None]
    hbm_tb_s: float
    intra_node_gb_s: float | None
    inter_node_gb_s: float | None
    efficiency: EfficiencyTable

    @property
    def devices(self) -> int:
        return self.devices_per_node * self.nodes

    @property
    def memory_bytes_per_s(self) -> float:
        return self.hbm_tb_s * 1e12

    def peak_flops(self, dtype: str) -> float | None:
        tflops = self.peak_tflops.get(dtype)
        return None if tflops is None else tflops * 1e12

    def link(self, group_size: int) -> tuple[str, float]:
        """(link kind, per-direction bytes/s) for a group of consecutive ranks: intra-node when
        the group fits in one node, else inter-node (the slowest hop of a ring sets its speed)."""
        kind = "intra_node" if group_size <= self.devices_per_node else "inter_node"
        gb_s = self.intra_node_gb_s if kind == "intra_node" else self.inter_node_gb_s
        if not gb_s:
            raise ConfigError(f"hardware {self.name}: {kind}_gb_s is null but a group of {group_size} devices needs it")
        return kind, gb_s * 1e9


def read_hardware_file(path: str | Path) -> dict:
    """The `hardware:` node of a conf/hardware/*.yaml file (the file also holds the default `parallel:`)."""
    import yaml

    return yaml.safe_load(Path(path).read_text())["hardware"]


def hardware_spec(hardware: Mapping, stack: str = DEFAULT_STACK) -> HardwareSpec:
    """Parse (and cache) a hardware dict, with the efficiency table of software `stack`.

    hardware.efficiency_table: null (built-in factors), a path (used when the table's `stack` is
    `stack` or unset; a table of another stack is ignored), or a mapping {stack: path or null}. The
    stack's `table` (sims/stacks.yaml) names the entry that serves it, `borrowed_ops` the ops timed
    from another stack's entry."""
    return _parse(json_key(hardware, "hardware"), stack)


@lru_cache(maxsize=64)
def _parse(key: str, stack: str) -> HardwareSpec:
    hw = json.loads(key)
    missing = [k for k in REQUIRED if hw.get(k) is None]
    if missing:
        raise ConfigError(f"hardware {hw.get('name', '?')}: missing {', '.join(missing)}; see conf/hardware/h100.yaml")
    peaks = hw["peak_tflops"]
    if not isinstance(peaks, dict) or not set(peaks) <= set(DTYPES):
        raise ConfigError(
            f"hardware {hw['name']}: peak_tflops must map {', '.join(DTYPES)} to TFLOP/s or null; got {peaks!r}"
        )
    for key_name in ("devices_per_node", "nodes"):
        if not isinstance(hw[key_name], int) or hw[key_name] < 1:
            raise ConfigError(f"hardware {hw['name']}: {key_name} is {hw[key_name]!r}; expected an integer >= 1")
    for key_name in ("memory_gb", "hbm_tb_s"):
        if not isinstance(hw[key_name], (int, float)) or hw[key_name] <= 0:
            raise ConfigError(f"hardware {hw['name']}: {key_name} is {hw[key_name]!r}; expected a positive number")
    return HardwareSpec(
        name=str(hw["name"]),
        devices_per_node=hw["devices_per_node"],
        nodes=hw["nodes"],
        memory_gb=float(hw["memory_gb"]),
        peak_tflops={d: peaks.get(d) for d in DTYPES},
        hbm_tb_s=float(hw["hbm_tb_s"]),
        intra_node_gb_s=hw.get("intra_node_gb_s"),
        inter_node_gb_s=hw.get("inter_node_gb_s"),
        efficiency=_efficiency_table(hw.get("efficiency_table"), stack),
    )


def _efficiency_table(setting, stack_name: str) -> EfficiencyTable:
    spec = stack(stack_name)  # a known stack, else ConfigError
    table = _stack_table(setting, spec.table)
    for op, donor in spec.borrowed_ops:
        table = _with_op_from(table, _stack_table(setting, donor), op)
    return table


def _with_op_from(table: EfficiencyTable, donor: EfficiencyTable, op: str) -> EfficiencyTable:
    """`table` with `op`'s forward fit and its forward and backward measurements taken from `donor`, the
    table of the stack whose kernels run that op; unchanged when `donor` never measured it."""
    if op not in donor.ops:
        return table
    return replace(
        table, ops={**table.ops, op: donor.ops[op]}, source=f"{table.source}; {op} from {donor.source}",
        op_measurements=tuple(m for m in table.op_measurements if m.op != op)
        + tuple(m for m in donor.op_measurements if m.op == op),
        backward_measurements=tuple(m for m in table.backward_measurements if m.op != op)
        + tuple(m for m in donor.backward_measurements if m.op == op))


def _stack_table(setting, stack_name: str) -> EfficiencyTable:
    path = setting.get(stack_name) if isinstance(setting, Mapping) else setting
    if path is None:
        return EfficiencyTable()
    table = _load(path)
    if table.stack not in (None, stack_name):
        return EfficiencyTable(source=f"built-in defaults (the table {path} describes stack {table.stack})")
    return table


def _load(path: str) -> EfficiencyTable:
    candidate = Path(path)
    if not candidate.is_absolute() and not candidate.exists():
        candidate = REPO_ROOT / candidate  # paths in conf/ are relative to the repository root
    if not candidate.exists():
        raise ConfigError(
            f"hardware.efficiency_table {path} does not exist (relative paths: cwd or repo root); or set it to null"
        )
    return load_table(candidate)
