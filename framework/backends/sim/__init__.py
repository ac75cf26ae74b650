"""Backend `sim`: the performance simulator in sims/, driven from the Hydra config."""
