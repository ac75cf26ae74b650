"""Speed benchmarks of the maxtext backend (GRPO step) and of the TRL baseline on the same shapes."""
