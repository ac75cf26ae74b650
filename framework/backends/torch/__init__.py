"""Backend `torch`: SFT and DPO with transformers, PEFT and TRL (SFTTrainer, DPOTrainer)."""
