"""The torch backend's trainers: sft (TRL SFTTrainer), dpo (TRL DPOTrainer)."""
