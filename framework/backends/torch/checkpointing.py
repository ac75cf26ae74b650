"""Checkpoints of a TRL trainer under the core contract: safetensors and JSON, never pickle.

TRL/transformers' own checkpoints torch.save the optimizer and the RNG states (pickles). Instead the
trainer classes mix in `CrucibleCheckpointing`, which replaces transformers' save and load hooks:

    model.safetensors       the trainable parameters (the LoRA adapter, or every weight)
    optimizer.safetensors   AdamW's per-parameter tensors;  optimizer.json: its param groups
    scheduler.json          the LR scheduler's state;  scaler.json: the fp16 grad scaler's, if any
    trainer_state.json      transformers' TrainerState (global step, epoch, tokens seen), history dropped
    rng.safetensors         torch CPU/CUDA generator states of every rank;  rng.json: Python and numpy's

transformers then resumes as from its own checkpoint: it skips the batches already consumed in the
epoch (seeded sampler), restores the RNG after the skip, and continues at the next optimizer step.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from framework.core.checkpoint import CheckpointStore
from framework.core.errors import CheckpointError

TRAINER_STATE = "trainer_state.json"  # transformers.trainer.TRAINER_STATE_NAME: it reads this file on resume


class CrucibleCheckpointing:
    """Mixed into a transformers Trainer subclass (before it in the bases)."""

    crucible_store: CheckpointStore | None = None
    crucible_last_checkpoint: Path | None = None
    crucible_counters: tuple[str, ...] = ("_total_train_tokens",)  # TRL's own running totals of the metrics

    # ---- saving (transformers calls _save_checkpoint when control.should_save) -------------------

    def _save_checkpoint(self, model, trial) -> None:
        step = self.state.global_step
        rng = gather_rng_states()  # a collective: every rank takes part, the main rank writes
        state = {"global_step": step, "counters": {n: getattr(self, n) for n in self.crucible_counters
                                                   if hasattr(self, n)}}
        self.crucible_last_checkpoint = self.crucible_store.save(step, lambda folder: self._write(folder, rng), state)

    def _write(self, folder: Path, rng: list[dict]) -> None:
        save_file(trainable_state(self.model), folder / "model.safetensors")
        tensors, groups = optimizer_to_safetensors(self.optimizer.state_dict())
        save_file(tensors, folder / "optimizer.safetensors")
        _write_json(folder / "optimizer.json", groups)
        _write_json(folder / "scheduler.json", self.lr_scheduler.state_dict())
        scaler = getattr(self.accelerator, "scaler", None)
        if scaler is not None:
            _write_json(folder / "scaler.json", scaler.state_dict())
        saved = copy.copy(self.state)
        saved.log_history = []  # the run logger keeps the metrics; eval rows carry wall times
        saved.save_to_json(str(folder / TRAINER_STATE))
        save_file({f"{rank}.{name}": t for rank, states in enumerate(rng) for name, t in states["tensors"].items()},
                  folder / "rng.safetensors")
        _write_json(folder / "rng.json", [states["json"] for states in rng])

    # ---- loading (transformers calls these with the checkpoint folder given to train()) ------------

    def _load_from_checkpoint(self, resume_from_checkpoint, model=None) -> None:
        target = model if model is not None else self.model
        target = self.accelerator.unwrap_model(target) if hasattr(self, "accelerator") else target
        load_trainable_state(target, Path(resume_from_checkpoint) / "model.safetensors")

    def _load_optimizer_and_scheduler(self, checkpoint) -> None:
        if checkpoint is None:
            return
        folder = Path(checkpoint)
        groups = json.loads((folder / "optimizer.json").read_text())
        device = self.args.device  # a DDP rank on the CPU is "cpu:0", a name safetensors refuses
        tensors = load_file(folder / "optimizer.safetensors", device="cpu" if device.type == "cpu" else str(device))
        self.optimizer.load_state_dict(optimizer_from_safetensors(tensors, groups))
        self.lr_scheduler.load_state_dict(json.loads((folder / "scheduler.json").read_text()))

    def _load_scaler(self, checkpoint) -> None:
        scaler = getattr(self.accelerator, "scaler", None)
        if checkpoint is not None and scaler is not None and (Path(checkpoint) / "scaler.json").is_file():
            scaler.load_state_dict(json.loads((Path(checkpoint) / "scaler.json").read_text()))

    def _load_rng_state(self, checkpoint) -> None:
        if checkpoint is None:
            return
        folder = Path(checkpoint)
        tensors = load_file(folder / "rng.safetensors")
        states = json.loads((folder / "rng.json").read_text())
        rank = self.args.process_index if self.args.process_index < len(states) else 0
        set_rng_state({n.split(".", 1)[1]: t for n, t in tensors.items() if n.startswith(f"{rank}.")}, states[rank])

    def crucible_restore_counters(self, counters: dict) -> None:
        for name, value in counters.items():
            setattr(self, name, value)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that train (tied weights once), on the CPU, contiguous: what a checkpoint holds."""
    return {name: p.detach().to("cpu").contiguous() for name, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, path: Path) -> None:
    saved = load_file(path)
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    if set(saved) != set(params):
        extra = sorted(set(saved) ^ set(params))[:3]
        raise CheckpointError(f"{path}: its tensors do not match the model's trainable parameters (e.g. {extra}); "
                              f"was it saved with another model or finetune setting?")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(saved[name].to(param.device, param.dtype))


def optimizer_to_safetensors(state_dict: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """torch optimizer state -> ({'<param>.<key>': tensor}, JSON of param groups and scalar entries)."""
    tensors, scalars = {}, {}
    for index, entries in state_dict["state"].items():
        for key, value in entries.items():
            if torch.is_tensor(value):
                tensors[f"{index}.{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars[f"{index}.{key}"] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def optimizer_from_safetensors(tensors: dict[str, torch.Tensor], saved: dict) -> dict:
    state: dict[int, dict] = {}
    for name, value in [*tensors.items(), *saved["scalars"].items()]:
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = value
    return {"state": state, "param_groups": saved["param_groups"]}


def rng_state() -> dict:
    tensors = {"cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        tensors["cuda"] = torch.cuda.get_rng_state()
    version, keys, gauss = random.getstate()
    kind, np_keys, pos, has_gauss, cached = np.random.get_state()
    return {"tensors": tensors, "json": {"python": [version, list(keys), gauss],
                                          "numpy": [kind, np_keys.tolist(), int(pos), int(has_gauss), float(cached)]}}


def set_rng_state(tensors: dict[str, torch.Tensor], saved: dict) -> None:
    torch.random.set_rng_state(tensors["cpu"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["cuda"])
    version, keys, gauss = saved["python"]
    random.setstate((version, tuple(keys), gauss))
    kind, keys, pos, has_gauss, cached = saved["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def gather_rng_states() -> list[dict]:
    """Every rank's RNG state, in rank order (one rank: just this one)."""
    mine = rng_state()
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return [mine]
    gathered: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, mine)
    return gathered


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True))
