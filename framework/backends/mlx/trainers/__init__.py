"""The mlx backend's trainers: SFT and DPO share one loop (base.py)."""
