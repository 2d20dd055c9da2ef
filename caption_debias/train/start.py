"""The first lines of a training run, before torch is imported (seconds on a loaded machine):
what it loads and reads, then the imports themselves."""

from __future__ import annotations

from caption_debias.model.describe import describe
from caption_debias.progress import say
from caption_debias.train.config import TrainConfig


def announce(cfg: TrainConfig) -> None:
    """`caption-debias: loading model ..., reading DATA` on stderr (rank 0 of a torchrun, unless quiet).

    A run folder another process holds is refused first, in its one line (the run takes the lock
    itself once torch is imported: this only looks)."""
    import os

    from caption_debias.locking import folder_lock

    if os.environ.get("RANK", "0") != "0":
        return
    if cfg.out:
        with folder_lock(cfg.out, "train"):
            pass
    say(f"loading model {describe(cfg.model, cfg.pretrained)}, reading {cfg.data}", cfg.quiet)


def import_packages(cfg: TrainConfig) -> None:
    """torch and open_clip with only the integrations the model uses (model/imports.py), said first
    (rank 0 of a torchrun, unless quiet)."""
    import os

    from caption_debias.model.imports import import_open_clip

    loud = os.environ.get("RANK", "0") == "0" and not cfg.quiet
    import_open_clip([(cfg.model, cfg.pretrained)], say if loud else None)
