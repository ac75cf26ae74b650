"""The one definition of where Crucible's files are."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = REPO_ROOT / "conf"
PART_BYTES = 100  # a name part of a folder (a torchrun id in the run stamp too)
NAME_BYTES = 150  # the parts together: with a stamp of PART_BYTES and its `_`, within the 255 bytes a file name takes


def path_part(value) -> str:
    """`value` as one flat, safe part of a folder name: a typed name may be a Hugging Face id (`Qwen/Qwen3-8B`
    becomes `Qwen--Qwen3-8B`, as HF's own cache writes it), so `/` and `\\` never nest or leave the folder; any
    other character but letters, digits and `._+=@,-` becomes `-`; cut to PART_BYTES bytes of UTF-8."""
    text = re.sub(r"[/\\]", "--", str(value))
    return _cut(re.sub(r"[^\w.+=@,-]", "-", text), PART_BYTES)


def path_parts(*names) -> str:
    """conf/config.yaml's `${path_parts:...}`: the names as path_part's joined by `_`, cut to NAME_BYTES bytes (three
    long names, `backend.name` too, were 300 bytes: `OSError: File name too long`, exit 1)."""
    return _cut("_".join(map(path_part, names)), NAME_BYTES)


def _cut(text: str, limit: int) -> str:
    """`text` cut to `limit` bytes of UTF-8, on a character."""
    return text.encode("utf-8")[:limit].decode("utf-8", errors="ignore")


def load_conf(group: str, name: str) -> dict:
    """A config group's option as plain data (conf/<group>/<name>.yaml, resolved): for scripts outside Hydra."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / group / f"{name}.yaml"), resolve=True)


def check_cache_dir(value: str, key: str = "backend.adapter.cache_dir") -> str:
    """A backend's cache folder (models, data, compiled programs), made now: one that cannot be made was an
    OSError after the run had started (exit 1), an empty one put the cache in the current folder."""
    from framework.core.errors import ConfigError

    valid = "valid: a path where a folder can be made and written (default outputs/cache, or CRUCIBLE_CACHE=DIR)"
    if not str(value).strip():
        raise ConfigError(f"{key}: empty; {valid}")
    try:
        Path(value).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot make the folder {value!r} ({exc.strerror}: {exc.filename}); {valid}"
                          ) from None
    return str(value)
