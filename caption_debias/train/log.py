"""The training log: a metrics.jsonl line (rank 0) and TensorBoard scalars every --log-every
steps, and the progress bar on a terminal."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from caption_debias.errors import UserError
from caption_debias.train.config import TrainConfig
from caption_debias.train.distributed import all_sum
from caption_debias.train.objective import Losses


class TrainLog:
    """Use as a context manager around the steps; call `step_done` after every step and
    `write` on the steps `due` says (its `.item()` calls wait for the GPU, so only there)."""

    def __init__(
        self,
        metrics: Path,
        cfg: TrainConfig,
        rank: int,
        world: int,
        device: torch.device,
        start: int,
        total: int,
        steps_per_epoch: int,
    ):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.cfg, self.world, self.device = cfg, world, device
        self.start, self.total, self.steps_per_epoch = start, total, steps_per_epoch
        self.writer = None
        if rank == 0 and cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(metrics.parent / "tensorboard"))
        console = Console(stderr=True)
        self.progress = Progress(
            TextColumn("train"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=console,
            disable=cfg.quiet or rank != 0 or not console.is_terminal,
        )
        self.seen, self.t0 = 0, time.perf_counter()  # images and time since the last line
        self.metrics_fh = metrics.open("a", encoding="utf-8") if rank == 0 else None

    def __enter__(self) -> "TrainLog":
        self.progress.__enter__()
        self.task = self.progress.add_task("train", total=self.total, completed=self.start, info="")
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.progress.__exit__(*exc)
        finally:
            if self.metrics_fh is not None:
                self.metrics_fh.close()
            if self.writer is not None:
                self.writer.close()

    def step_done(self, done: int, images: int) -> None:
        self.seen += images
        self.progress.update(self.task, completed=done)

    def due(self, done: int) -> bool:
        return done % self.cfg.log_every == 0 or done == self.total

    def write(self, done: int, lr: float, losses: Losses, scale: torch.Tensor, counters: dict[str, int]) -> None:
        """One line after step `done`: losses averaged over ranks, images/s and counters summed."""
        loss = losses.total
        if not torch.isfinite(loss):
            raise UserError(f"step {done}: loss is {loss.item()}; lower --lr or use --precision fp32")
        self.progress.update(self.task, info=f"loss {loss.item():.4f}")
        parts = [
            loss.item(),
            losses.long.item(),
            losses.short.item() if losses.short is not None else 0.0,
            float(self.seen),
            float(counters["skipped"]),
            float(counters["fallback"]),
        ]
        parts = all_sum(parts, self.device, self.world)
        elapsed = time.perf_counter() - self.t0
        world = self.world
        line = {
            "step": done,
            "epoch": (done - 1) // self.steps_per_epoch,
            "loss": parts[0] / world,
            "loss_long": parts[1] / world,
            "loss_short": parts[2] / world if losses.short is not None else None,
            "lr": lr,
            "logit_scale": float(scale.item()),
            "images_per_s": parts[3] / elapsed if elapsed > 0 else None,
            "skipped_images": int(parts[4]),
            "fallback_single_sentence": int(parts[5]),
        }
        self.seen, self.t0 = 0, time.perf_counter()
        if self.metrics_fh is not None:
            self.metrics_fh.write(json.dumps(line) + "\n")
            self.metrics_fh.flush()
        if self.writer is not None:
            for key, value in line.items():
                if key not in ("step", "epoch") and value is not None:
                    self.writer.add_scalar(f"train/{key}", value, done)
