"""The one definition of where Crucible's files are."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = REPO_ROOT / "conf"


def load_conf(group: str, name: str) -> dict:
    """A config group's option as plain data (conf/<group>/<name>.yaml, resolved): for scripts outside Hydra."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / group / f"{name}.yaml"), resolve=True)
