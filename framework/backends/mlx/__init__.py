"""Backend `mlx`: SFT and DPO with LoRA on mlx-lm (Apple silicon; Linux CPU with mlx[cpu]).

Nothing here imports mlx at module level except the modules the trainers load (model_io, lora,
losses, optim, batching, checkpointing): the adapter is instantiated on every run that names it.
"""
