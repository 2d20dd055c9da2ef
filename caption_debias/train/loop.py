"""The training loop: set-up (train/run_setup.py), then one step per batch until the last.

A step: take the batch (count unreadable images), set the learning rate, encode the image
and the texts the recipe's objective names (train/objective.py), compute its losses, take the
optimizer step, log (train/log.py) and save a checkpoint when due. open_clip_train's
`train_one_epoch` has the same shape.

Recipes: `debias` (long + augmented caption), `longclip` (long + first sentence, PCA
matching), `clip` (long caption only, uniform position interpolation) and `short`
(stage-1 pretraining on one sentence at the model's own context).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch
import torch.distributed as dist

from caption_debias.errors import UserError
from caption_debias.model.load import latest_checkpoint
from caption_debias.model.trim import used_length
from caption_debias.train import checkpoint
from caption_debias.train.config import TrainConfig
from caption_debias.train.distributed import all_sum, init_distributed
from caption_debias.train.log import TrainLog
from caption_debias.train.objective import objective_for
from caption_debias.train.run_setup import LN100, METRICS, RunSetup, data_loader, set_up, training_net


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine to 0 at `total`."""
    if warmup and step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) the training `cfg` describes; returns the run folder."""
    cfg.validate()
    rank, world, local_rank, own_pg = init_distributed()
    try:
        return _train(cfg, rank, world, local_rank)
    finally:
        if own_pg:
            dist.destroy_process_group()


def _train(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> Path:
    setup = set_up(cfg, rank, world, local_rank)
    if setup.start >= setup.total:
        if latest_checkpoint(setup.run) is None or setup.total == 0:
            save_checkpoint(setup, cfg, setup.total, rank, world)  # --max-steps 0: the starting model
        return setup.run
    net, trim = training_net(setup, cfg, world)
    loader = data_loader(setup, cfg, rank, world)
    objective = objective_for(cfg)
    params = [p for p in setup.model.parameters() if p.requires_grad]
    log = TrainLog(
        setup.run / METRICS, cfg, rank, world, setup.device, setup.start, setup.total, setup.plan.steps_per_epoch
    )
    with log:
        for step, batch in zip(range(setup.start, setup.total), loader):
            count_unreadable(batch, setup.counters, cfg.strict, step)
            lr = lr_at(step, cfg.lr, cfg.warmup_steps, setup.total)
            for group in setup.optimizer.param_groups:
                group["lr"] = lr
            image = batch["image"].to(setup.device, non_blocking=True)
            texts = [batch[name] for name in objective.texts]
            img_f, txt_fs, scale = encode(net, image, texts, trim, setup.autocast, setup.device)
            losses = objective(img_f, txt_fs, scale)
            optimizer_step(losses.total, setup.optimizer, setup.scaler, params, cfg.grad_clip)
            with torch.no_grad():
                setup.model.logit_scale.clamp_(0, LN100)
            done = step + 1
            log.step_done(done, image.shape[0])
            if log.due(done):
                log.write(done, lr, losses, scale, setup.counters)
            if done % cfg.checkpoint_every == 0 or done == setup.total:
                save_checkpoint(setup, cfg, done, rank, world)
    return setup.run


def count_unreadable(batch: dict[str, Any], counters: dict[str, int], strict: bool, step: int) -> None:
    """Report and count the batch's skipped images (fatal with --strict) and single-sentence fallbacks."""
    for err in batch["errors"]:
        if strict:
            raise UserError(f"unreadable {err} (--strict)")
        print(f"caption-debias: skipped unreadable {err}", file=sys.stderr, flush=True)
    counters["skipped"] += len(batch["errors"])
    counters["fallback"] += batch["fallback"]
    if "image" not in batch:
        raise UserError(f"step {step}: every image of the batch is unreadable; check --image-root")


def encode(
    net: torch.nn.Module,
    image: torch.Tensor,
    texts: list[torch.Tensor],
    trim: bool,
    autocast: Callable[[], ContextManager],
    device: torch.device,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """(image features, one feature batch per text batch, logit scale), all float32.

    Trimmed: each text batch cut after its latest end token and encoded on its own (lengths
    read from the CPU tensors, so no device sync); otherwise all texts in one batch.
    """
    with autocast():
        if trim:
            img_f, txt_fs, scale = net(image, *(t[:, : used_length(t)].to(device, non_blocking=True) for t in texts))
        else:
            img_f, txt_f, scale = net(image, torch.cat(texts).to(device, non_blocking=True))[:3]
            txt_fs = txt_f.split(image.shape[0])
    return img_f.float(), [t.float() for t in txt_fs], scale.float()


def optimizer_step(
    loss: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    params: list[torch.nn.Parameter],
    grad_clip: float | None,
) -> None:
    """Backward and step; with a GradScaler, gradients are unscaled before clipping (as open_clip_train)."""
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
    else:
        loss.backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()


def save_checkpoint(setup: RunSetup, cfg: TrainConfig, step: int, rank: int, world: int) -> None:
    """Every rank sums its counters in; rank 0 writes the checkpoint; all wait for it."""
    counters = setup.counters
    totals = all_sum([counters["skipped"], counters["fallback"]], setup.device, world)
    if rank == 0:
        payload = {
            "model": setup.model.state_dict(),
            "optimizer": setup.optimizer.state_dict(),
            "scaler": setup.scaler.state_dict() if setup.scaler is not None else {},
            "rng": checkpoint.rng_state(),
            "counters": {"skipped": int(totals[0]), "fallback": int(totals[1])},
        }
        checkpoint.save(setup.run, step, payload, cfg.keep_checkpoints)
    if world > 1:
        dist.barrier()
