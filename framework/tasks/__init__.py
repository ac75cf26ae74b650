"""Backend-neutral task schemas: one typed dataclass per task, values in conf/task/<task>.yaml.

A backend reads the same `sft:` or `dpo:` node whether it is torch or mlx; knobs only one backend
has sit under that backend's own node. `framework.core.build.build(SFTTask, cfg.sft, "sft")` is the
one way to turn the node into the dataclass.
"""
