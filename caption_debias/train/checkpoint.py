"""Atomic checkpoints of plain tensors/dicts, read back weights-only.

One file per saved step (RUN/checkpoints/step_00000100.pt): model state, optimizer, scaler,
RNG states (as tensors), step and the run's counters. Written to a temporary name in the
same folder and renamed, so a crash never leaves a half-written "latest" checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from caption_debias.errors import UserError
from caption_debias.model.load import CHECKPOINT_DIR, latest_checkpoint


def checkpoint_path(run: Path, step: int) -> Path:
    return run / CHECKPOINT_DIR / f"step_{step:08d}.pt"


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run: Path, step: int, payload: dict[str, Any], keep: int = 0) -> Path:
    path = checkpoint_path(run, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    torch.save({**payload, "step": step}, tmp)
    os.replace(tmp, path)
    if keep:
        for old in sorted(path.parent.glob("step_*.pt"))[:-keep]:
            old.unlink(missing_ok=True)
    return path


def load_latest(run: Path) -> dict[str, Any] | None:
    path = latest_checkpoint(run)
    if path is None:
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torn or foreign file: say which, in one line
        raise UserError(f"{path}: cannot resume from this checkpoint ({str(exc).splitlines()[0]})") from None
