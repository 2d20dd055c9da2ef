"""Atomic checkpoints of plain tensors/dicts, read back weights-only.

One file per saved step (RUN/checkpoints/step_00000100.pt): model state, optimizer, scaler,
every rank's RNG states (as tensors), step and the run's counters. Written to a temporary
name in the same folder, fsynced, then renamed (and the folder fsynced), so neither a crash
nor a power cut leaves a half-written "latest" checkpoint under its final name.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

from caption_debias.errors import UserError
from caption_debias.model.load import CHECKPOINT_DIR, newest_readable_checkpoint, read_run_checkpoint, unreadable

DAMAGED_SUFFIX = ".damaged"


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


def rank_rng_state(saved: dict[str, Any], rank: int) -> dict[str, Any] | None:
    """This rank's saved RNG state: from the per-rank list, or the one state older checkpoints hold."""
    if "ranks" in saved:
        ranks = saved["ranks"]
        return ranks[rank] if rank < len(ranks) else None
    return saved


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a file system without directory handles: the rename itself is what it offers
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save(run: Path, step: int, payload: dict[str, Any], keep: int = 0) -> Path:
    path = checkpoint_path(run, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            torch.save({**payload, "step": step}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{path}: cannot write the checkpoint ({exc.strerror or exc})") from None
    _fsync_dir(path.parent)
    if keep:
        for old in sorted(path.parent.glob("step_*.pt"))[:-keep]:
            old.unlink(missing_ok=True)
    return path


def remove_stale_temporaries(run: Path) -> list[Path]:
    """Temporary checkpoint files a killed run left behind (the caller holds the run's lock)."""
    removed = []
    for tmp in (run / CHECKPOINT_DIR).glob(".step_*.pt.tmp*"):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def read_for_resume(file: str) -> dict[str, Any]:
    """`--resume FILE`: that checkpoint, or one line saying why it cannot be resumed from."""
    try:
        return read_run_checkpoint(Path(file))
    except FileNotFoundError:
        raise UserError(f"--resume {file}: no such checkpoint file") from None
    except Exception as exc:  # torn, foreign, or Python objects in it: one line saying which
        raise unreadable(f"--resume {file}", exc) from None


def newest_for_resume(run: Path, set_aside: bool) -> dict[str, Any] | None:
    """`--resume latest`: the newest readable checkpoint of `run` (None: the run has none yet).

    With `set_aside` (rank 0, holding the run's lock), each damaged newer checkpoint is named
    on stderr and renamed to *.damaged: kept for a look, out of the way of later saves and of
    `eval`; the run goes on, exactly, from the one before it. Other ranks read after rank 0.
    """

    def skipped(path: Path, why: UserError) -> None:
        aside = path.with_name(path.name + DAMAGED_SUFFIX)
        os.replace(path, aside)
        print(
            f"caption-debias: skipping damaged checkpoint {why}; moved to {aside.name}",
            file=sys.stderr,
            flush=True,
        )

    had_any = any((run / CHECKPOINT_DIR).glob("step_*.pt"))
    found = newest_readable_checkpoint(run, skipped if set_aside else None)
    if found is None:
        if had_any:
            raise UserError(f"{run}: every checkpoint is damaged (moved aside as *{DAMAGED_SUFFIX}); nothing to resume")
        return None
    return found[1]
