"""The training log: a metrics.jsonl line (rank 0) and the --report-to scalars (TensorBoard,
wandb) every --log-every steps; progress on the shared `caption_debias.progress.Progress` (a bar
on a terminal, else a plain line at the first step two seconds in, then every --log-interval seconds). A
quiet run reports its steps and loss to the progress it runs under (the demo's)."""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import torch

from caption_debias import progress as shared
from caption_debias.errors import UserError
from caption_debias.train.config import TrainConfig
from caption_debias.train.distributed import all_sum
from caption_debias.train.objective import Losses


class TrainLog:
    """Use as a context manager around the steps; call `step_done` after every step, `write` on
    the steps `due` says (its `.item()` calls wait for the GPU, so only there), then `tick`."""

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
        self.cfg, self.world, self.device = cfg, world, device
        self.start, self.total, self.steps_per_epoch = start, total, steps_per_epoch
        reporters = set(cfg.reporters)
        if "all" in reporters:
            reporters = {"tensorboard", "wandb"}
        self.writer = None
        self.wandb = None
        if rank == 0 and "tensorboard" in reporters:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(metrics.parent / "tensorboard"))
        if rank == 0 and "wandb" in reporters:
            self.wandb = _start_wandb(metrics.parent, cfg)
        self.progress = shared.Progress(
            "train",
            "steps",
            total,
            quiet=cfg.quiet or rank != 0,
            interval=cfg.log_interval,
            start=start,
        )
        self.outer = rank == 0 and self.progress.quiet  # a quiet run's steps count in the progress it runs under
        self.info = ""
        self.seen, self.t0 = 0, time.perf_counter()  # images and time since the last line
        self.metrics_fh = metrics.open("a", encoding="utf-8") if rank == 0 else None

    def __enter__(self) -> "TrainLog":
        self.progress.__enter__()
        if self.outer:
            shared.add_work(self.total - self.start)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            self.progress.__exit__(exc_type, *exc)
        finally:
            if self.metrics_fh is not None:
                self.metrics_fh.close()
            if self.writer is not None:
                self.writer.close()
            if self.wandb is not None:
                self.wandb.finish(exit_code=0 if exc_type is None else 1)

    def step_done(self, done: int, images: int) -> None:
        self.seen += images

    def tick(self, done: int) -> None:
        """After the step's log line: the step counted, its line shown when due (the first at once)."""
        if self.outer:
            shared.advance(1, extra=self.info)
        else:
            self.progress.update(done, extra=self.info)

    def due(self, done: int) -> bool:
        return done % self.cfg.log_every == 0 or done == self.total

    def write(self, done: int, lr: float, losses: Losses, scale: torch.Tensor, counters: dict[str, int]) -> None:
        """One line after step `done`: losses averaged over ranks, images/s and counters summed."""
        loss = losses.total
        if not torch.isfinite(loss):
            raise UserError(f"step {done}: loss is {loss.item()}; lower --lr or use --precision fp32")
        self.info = f"loss {loss.item():.4f}"
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
        self._report("train", line, done)

    def write_validation(self, done: int, metrics: dict[str, float]) -> None:
        """Validation recall (rank 0): a metrics.jsonl line of its own, and val/ scalars."""
        line = {
            "step": done,
            "epoch": (done - 1) // self.steps_per_epoch,
            **{f"val_{k}": v for k, v in metrics.items()},
        }
        if self.metrics_fh is not None:
            self.metrics_fh.write(json.dumps(line) + "\n")
            self.metrics_fh.flush()
        self._report("val", metrics, done)
        if self.progress.mode == "plain":
            shown = ", ".join(f"{k} {v:.1f}" for k, v in metrics.items() if k.endswith("r1"))
            print(f"caption-debias train: step {done} validation: {shown}", file=sys.stderr, flush=True)

    def _report(self, prefix: str, values: dict, step: int) -> None:
        scalars = {
            f"{prefix}/{k}": v for k, v in values.items() if k not in ("step", "epoch") and isinstance(v, (int, float))
        }
        if self.writer is not None:
            for key, value in scalars.items():
                self.writer.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)


def _start_wandb(run: Path, cfg: TrainConfig):
    """A wandb run in RUN/wandb, named after the run folder, its id kept there so that --resume
    continues it; WANDB_MODE=offline writes it locally for a later `wandb sync`."""
    try:
        import wandb
    except ImportError:
        raise UserError("--report-to wandb: wandb is not installed (pip install wandb)") from None
    (run / "wandb").mkdir(parents=True, exist_ok=True)
    id_file = run / "wandb" / "run_id"  # kept with the run folder: a resumed run continues its wandb run
    if not id_file.is_file():
        id_file.write_text(secrets.token_hex(6), "utf-8")
    try:
        return wandb.init(
            project=cfg.wandb_project_name,
            name=run.name,
            id=id_file.read_text("utf-8").strip(),
            resume="allow",
            dir=str(run),
            config=cfg.to_dict(),
        )
    except Exception as exc:  # no login, no network: one line saying how to go on
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"--report-to wandb: {first} (log in with `wandb login`, or set WANDB_MODE=offline)") from None
