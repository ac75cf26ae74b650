"""How a failed run or bad input ends: one line on stderr and an exit status (2: bad input, 1: a failed run).

Used by run.py's guard (framework/cli.py) and by the runtime for a single run's failure; CRUCIBLE_DEBUG=1
or debug=true shows the traceback as well.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

EXIT_BAD_INPUT, EXIT_RUN_FAILED = 2, 1


def debug_requested(argv: list[str]) -> bool:
    return os.environ.get("CRUCIBLE_DEBUG", "") not in ("", "0") or any(a in ("debug=true", "debug=True") for a in argv)


def _unknown_key(exc: BaseException) -> str | None:
    """'Key not in struct' (a typo in an override) says which keys exist there."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = exc.__cause__
    if not isinstance(cause, (ConfigAttributeError, ConfigKeyError)) or "not in struct" not in str(cause):
        return None
    full_key = getattr(cause, "full_key", "") or str(getattr(cause, "key", ""))
    parent = getattr(cause, "parent_node", None)
    valid = ", ".join(str(k) for k in parent.keys()) if parent is not None else ""
    where = full_key.rpartition(".")[0] or "the top level"
    hint = f"; valid keys under {where}: {valid}" if valid else ""
    return f"unknown key '{full_key}'{hint} (use +{full_key}=... to add a new key)"


def _list_for_mapping(exc: BaseException) -> str | None:
    """`parallel=[1,2]`: Hydra's 'Cannot merge DictConfig with ListConfig' says which key, not what it takes."""
    from omegaconf import DictConfig, ListConfig
    from omegaconf.errors import ConfigTypeError

    cause = exc.__cause__
    if not isinstance(cause, ConfigTypeError) or not str(cause).startswith("Cannot merge "):
        return None
    key, node = getattr(cause, "full_key", "") or "", getattr(cause, "parent_node", None)
    given = str(exc).removeprefix("Error merging override ").strip()
    if isinstance(node, DictConfig):
        return (f"{given}: {key} is a mapping, not a list; valid: its keys one at a time, {key}.KEY=VALUE with KEY "
                f"one of {', '.join(str(k) for k in node.keys() if not str(k).startswith('_'))}")
    if isinstance(node, ListConfig):
        return f"{given}: {key} is a list, not a mapping; valid: a list, {key}=[a,b]"
    return None


def _missing_in_dir_name(exc: BaseException) -> str | None:
    """`~model.name` or `model.name=???`: the run or sweep dir's name reads it, and Hydra resolves that before any
    check runs."""
    import re

    from omegaconf.errors import InterpolationKeyError, InterpolationToMissingValueError

    key = getattr(exc, "full_key", "")
    if key not in ("hydra.run.dir", "hydra.sweep.dir"):
        return None
    if isinstance(exc, InterpolationKeyError) and (missing := re.match(r"Interpolation key '([^']+)' not found",
                                                                       str(exc))):
        return (f"{missing[1]}: missing key; {key} names its folder after it (conf/config.yaml); valid: keep "
                f"{missing[1]}, or give {key}=DIR")
    if isinstance(exc, InterpolationToMissingValueError) and (missing := re.search(r"Missing mandatory value: (\S+)",
                                                                                   str(exc))):
        return (f"{missing[1]}: missing value (???); {key} names its folder after it (conf/config.yaml); valid: give "
                f"{missing[1]}=NAME, or {key}=DIR")
    return None


def one_line(exc: BaseException) -> str:
    """A Hydra/OmegaConf error message folded into one line, with its cause when that says more."""
    special = _unknown_key(exc) or _list_for_mapping(exc) or _missing_in_dir_name(exc)
    if special:
        return special
    parts = [line.strip() for line in str(exc).splitlines() if line.strip()]
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in str(exc):
        parts += [line.strip() for line in str(cause).splitlines() if line.strip()]
    return " ".join(parts) or type(exc).__name__


def fail(exc: BaseException, debug: bool | None = None, run_dir: Path | None = None) -> None:
    """Print `exc` as one line on stderr and exit: 2 for bad input, 1 for a failed run."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from framework.core.errors import CrucibleError

    from framework.core.stopping import disk_full

    debug = debug if debug is not None else debug_requested(sys.argv[1:])
    exc = disk_full(exc) or exc  # also a full disk under Hydra's own files (.hydra/, run.log)
    if debug:
        traceback.print_exception(exc)
    if isinstance(exc, (CrucibleError, HydraException, OmegaConfBaseException)):
        sys.stderr.write(f"error: {one_line(exc)}\n")
        sys.exit(EXIT_RUN_FAILED if _is_run_failure(exc) else EXIT_BAD_INPUT)
    # a bug or a backend crash: one line here, the whole traceback in the run directory
    where = f"traceback in {run_dir / 'traceback.txt'}" if run_dir else "CRUCIBLE_DEBUG=1 shows the traceback"
    sys.stderr.write(f"error: {type(exc).__name__}: {exc} ({where})\n")
    sys.exit(EXIT_RUN_FAILED)


def _is_run_failure(exc: BaseException) -> bool:
    from framework.core.errors import BackendError, CrucibleError, RunFailure

    return isinstance(exc, (BackendError, RunFailure)) or (type(exc) is CrucibleError)
