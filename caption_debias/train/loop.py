"""The training loop: set-up (train/run_setup.py), then one step per batch until the last.

A step: take the batch (count unreadable images), set the learning rate, encode the image
and the texts the recipe's objective names (train/objective.py), compute its losses, take the
optimizer step, log (train/log.py), validate and save a checkpoint when due. open_clip_train's
`train_one_epoch` has the same shape, and the same gradient accumulation (--accum-freq):
features of every micro-batch first without gradients, then each micro-batch again with
gradients against the others' cached features, so the step is the large batch's.

Recipes: `debias` (long + augmented caption), `longclip` (long + first sentence, PCA
matching), `clip` (long caption only, uniform position interpolation) and `short`
(stage-1 pretraining on one sentence at the model's own context).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch
import torch.distributed as dist

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.locking import folder_lock
from caption_debias.model.load import latest_checkpoint
from caption_debias.model.trim import used_length
from caption_debias.train import checkpoint, precision
from caption_debias.train.config import TrainConfig
from caption_debias.train.distributed import all_sum, barrier, broadcast_from_rank0, gather_to_rank0, init_distributed
from caption_debias.train.log import TrainLog
from caption_debias.train.objective import Losses, objective_for
from caption_debias.train.run_setup import LN100, METRICS, RunSetup, data_loader, set_up, training_net


def lr_at(step: int, base: float, warmup: int, total: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine to 0 at `total`."""
    if warmup and step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) the training `cfg` describes; returns the run folder.

    Rank 0 holds the run folder's lock for the whole run: a second `train` on the same folder
    is refused at once, naming the holder.
    """
    cfg.validate()
    rank, world, local_rank, own_pg = init_distributed()
    try:
        out = str(run_folder(cfg, world))
        cfg = dataclasses.replace(cfg, out=out, logs=None, name=None)
        storage.refuse_overlap([d for d in (cfg.data, cfg.val_data) if d], out)  # before the lock goes in
        with folder_lock(out, "train") if rank == 0 else nullcontext():
            return _train(cfg, rank, world, local_rank)
    finally:
        if own_pg:
            dist.destroy_process_group()


def run_folder(cfg: TrainConfig, world: int) -> Path:
    """--out, or open_clip_train's LOGS/NAME (NAME made as open_clip_train makes it when not given)."""
    if cfg.out:
        return Path(cfg.out)
    name = cfg.name
    if not name:
        date = broadcast_from_rank0(datetime.now().strftime("%Y_%m_%d-%H_%M_%S"), world)
        model = str(cfg.model).replace("/", "-")
        name = "-".join(
            [date, f"model_{model}", f"lr_{cfg.lr}", f"b_{cfg.batch_size}", f"j_{cfg.workers}", f"p_{cfg.precision}"]
        )
    assert cfg.logs is not None  # TrainConfig.check: --out or --logs
    return Path(cfg.logs) / name


def _train(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> Path:
    setup = set_up(cfg, rank, world, local_rank)
    if setup.start >= setup.total:
        if latest_checkpoint(setup.run) is None or setup.total == 0:
            save_checkpoint(setup, cfg, setup.total, rank, world)  # --max-steps 0: the starting model
        return setup.run
    net, trim = training_net(setup, cfg, world)
    batches = iter(data_loader(setup, cfg, rank, world))
    if setup.rng is not None:  # after the loader's iterator exists: dropout continues where the run stopped
        checkpoint.set_rng_state(setup.rng)
    objective = objective_for(cfg)
    params = [p for p in setup.model.parameters() if p.requires_grad]
    in_dtype = precision.input_dtype(cfg.precision)
    validation = None
    if cfg.val_data:
        from caption_debias.train.validate import Validation

        validation = Validation(cfg, setup, rank)
    log = TrainLog(
        setup.run / METRICS, cfg, rank, world, setup.device, setup.start, setup.total, setup.plan.steps_per_epoch
    )
    with log:
        for step in range(setup.start, setup.total):
            micro = [next(batches) for _ in range(cfg.accum_freq)]
            for batch in micro:
                count_unreadable(batch, setup.counters, cfg.strict, step)
            lr = lr_at(step, cfg.lr, cfg.warmup_steps, setup.total)
            for group in setup.optimizer.param_groups:
                group["lr"] = lr
            setup.optimizer.zero_grad(set_to_none=True)
            inputs = [to_device(batch, objective.texts, setup.device, in_dtype) for batch in micro]
            if len(inputs) == 1:
                losses, scale = plain_backward(net, inputs[0], objective, trim, setup.autocast, setup.scaler)
            else:
                losses, scale = accumulated_backward(net, inputs, objective, trim, setup.autocast, setup.scaler)
            optimizer_step(setup.optimizer, setup.scaler, params, cfg.grad_clip)
            with torch.no_grad():
                setup.model.logit_scale.clamp_(0, LN100)
            done = step + 1
            log.step_done(done, sum(image.shape[0] for image, _ in inputs))
            if log.due(done):
                log.write(done, lr, losses, scale, setup.counters)
            log.tick(done)
            if validation is not None and validation.due(done, setup.plan.steps_per_epoch, setup.total):
                if rank == 0:
                    log.write_validation(done, validation.run())
                barrier(world)
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


def to_device(
    batch: dict[str, Any], texts: tuple[str, ...], device: torch.device, in_dtype: torch.dtype | None
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(images on the device in the precision's input type, the objective's text batches on the CPU;
    `encode` cuts and moves them)."""
    image = batch["image"].to(device, non_blocking=True)
    if in_dtype is not None:
        image = image.to(in_dtype)
    return image, [batch[name] for name in texts]


def encode(
    net: torch.nn.Module,
    image: torch.Tensor,
    texts: list[torch.Tensor],
    trim: bool,
    autocast: Callable[[], ContextManager],
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """(image features, one feature batch per text batch, logit scale), all float32.

    Trimmed: each text batch cut after its latest end token and encoded on its own (lengths
    read from the CPU tensors, so no device sync); otherwise all texts in one batch.
    """
    device = image.device
    with autocast():
        if trim:
            img_f, txt_fs, scale = net(image, *(t[:, : used_length(t)].to(device, non_blocking=True) for t in texts))
        else:
            img_f, txt_f, scale = net(image, torch.cat(texts).to(device, non_blocking=True))[:3]
            txt_fs = txt_f.split(image.shape[0])
    return img_f.float(), [t.float() for t in txt_fs], scale.float()


def backward(loss: torch.Tensor, scaler: torch.amp.GradScaler | None) -> None:
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()


def plain_backward(net, batch, objective, trim, autocast, scaler) -> tuple[Losses, torch.Tensor]:
    """One batch: encode, objective, backward."""
    image, texts = batch
    img_f, txt_fs, scale = encode(net, image, texts, trim, autocast)
    losses = objective(img_f, txt_fs, scale)
    backward(losses.total, scaler)
    return losses, scale


def accumulated_backward(net, micro, objective, trim, autocast, scaler) -> tuple[Losses, torch.Tensor]:
    """open_clip_train's accumulation: every micro-batch's features without gradients, then each
    micro-batch again with gradients, its fresh features in place of its cached ones, one backward
    each. The objective always sees the whole batch (the PCA term included), so the summed
    gradients are the large batch's. Returns the last pass's losses (the whole batch's value)."""
    with torch.no_grad():
        cached = [encode(net, image, texts, trim, autocast) for image, texts in micro]
    losses = scale = None
    for j, (image, texts) in enumerate(micro):
        img_f, txt_fs, scale = encode(net, image, texts, trim, autocast)
        all_img = torch.cat([c[0] for c in cached[:j]] + [img_f] + [c[0] for c in cached[j + 1 :]])
        all_txt = [
            torch.cat([c[1][t] for c in cached[:j]] + [txt_fs[t]] + [c[1][t] for c in cached[j + 1 :]])
            for t in range(len(txt_fs))
        ]
        # The logit scale enters every pass whole: its gradient is taken in the last pass only
        # (open_clip_train takes it in each, accum-freq times the large batch's).
        losses = objective(all_img, all_txt, scale if j == len(micro) - 1 else scale.detach())
        backward(losses.total, scaler)
    assert losses is not None  # micro holds one micro-batch or more
    return losses, scale


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    params: list[torch.nn.Parameter],
    grad_clip: float | None,
) -> None:
    """Step on the gradients the backward passes left; with a GradScaler, gradients are unscaled
    before clipping (as open_clip_train)."""
    if scaler is not None:
        scaler.unscale_(optimizer)
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
    rng = gather_to_rank0(checkpoint.rng_state(), world)  # every rank's, for its own dropout on resume
    if rank == 0:
        payload = {
            "model": setup.model.state_dict(),
            "optimizer": setup.optimizer.state_dict(),
            "scaler": setup.scaler.state_dict() if setup.scaler is not None else {},
            "rng": {"ranks": rng},
            "counters": {"skipped": int(totals[0]), "fallback": int(totals[1])},
        }
        checkpoint.save(setup.run, step, payload, cfg.keep_checkpoints)
    barrier(world)
