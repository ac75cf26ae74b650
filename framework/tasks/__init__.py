"""Backend-neutral task schemas: one typed dataclass per task, values in conf/task/<task>.yaml.

    grpo.py      GRPOTask, GRPOEvalConfig, check_grpo_values      (node `grpo:`)
    sft.py       SFTTask, check_sft                               (node `sft:`)
    dpo.py       DPOTask, check_dpo                               (node `dpo:`)
    pretrain.py  PretrainTask, check_pretrain                     (node `pretrain:`)
    sim.py       SimTask (the simulator; layout from `parallel`)  (node `sim:`)
    calibrate.py CalibrateTask, check_calibrate_values            (node `calibrate:`)
    common.py    OptimizerConfig, LoRAConfig, EvalConfig, CheckpointPolicy and shared checks

A backend reads the same `sft:` or `dpo:` node whether it is torch or mlx; knobs only one backend
has sit under that backend's own node (conf/backend/NAME.yaml). `framework.core.build.build(SFTTask,
cfg.sft, "sft")` is the one way to turn the node into the dataclass. Each task yaml's defaults list
names the model and data it runs with unless `model=`/`data=` or a recipe says otherwise.
"""
