"""GPU benchmarks of the torch backend: SFT/DPO tokens/s and MFU, our step time vs TRL run directly."""
