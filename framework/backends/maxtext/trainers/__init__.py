"""Trainers of the maxtext backend (GRPO) and the pieces they are built from."""
