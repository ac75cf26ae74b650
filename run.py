"""Crucible's command line: `python run.py backend=... task=... model=... hardware=...` (see README)."""

import hydra
from omegaconf import DictConfig

from framework.cli import run_guarded


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def app(cfg: DictConfig):
    from framework.core.errors import CrucibleError
    from framework.core.failure import fail
    from framework.core.runtime import run_from_hydra
    from framework.core.sweep import objective_value

    result = run_from_hydra(cfg)
    try:
        return objective_value(cfg.task.get("objective"), result)  # a search's sweeper reads it (recipe=sim_search)
    except CrucibleError as exc:  # its one line; raised, Hydra would print "Error executing job ..." before it
        fail(exc, debug=cfg.get("debug") is True or None)


def main() -> None:
    run_guarded(app)


if __name__ == "__main__":
    main()
