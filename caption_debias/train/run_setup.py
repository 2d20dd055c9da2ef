"""A run's set-up: checks, model, data, optimizer, precision, resume state and the run's files.

What open_clip_train's main.py does before its epoch loop; train/loop.py calls `set_up`, then
`training_net` and `data_loader`, and from there only steps.
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch

from caption_debias.augment import DebiasOptions
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.model.load import RUN_CONFIG, RUN_MODEL_CONFIG, LoadedModel, latest_checkpoint, load_model
from caption_debias.model.stretch import is_split, split_frozen_head, stretch_positional_embedding
from caption_debias.model.trim import TrimmedCLIP, can_trim
from caption_debias.train import checkpoint
from caption_debias.train.config import TrainConfig
from caption_debias.train.data import BatchPlan, FolderImages, TrainRows, TrainSamples, collate, load_rows
from caption_debias.train.distributed import device_for

METRICS = "metrics.jsonl"
LN100 = math.log(100.0)  # open_clip's bound on the logit scale: scale <= 100
# Options that may change between a run and its --resume; any other change is refused.
RESUME_FREE = {
    "resume",
    "quiet",
    "workers",
    "max_steps",
    "epochs",
    "checkpoint_every",
    "log_every",
    "device",
    "strict",
    "keep_checkpoints",
    "tensorboard",
    "cache_images",
    "image_root",
}


def say(msg: str, rank: int = 0, quiet: bool = False) -> None:
    """A note on stderr, from rank 0 only."""
    if rank == 0 and not quiet:
        print(f"caption-debias: {msg}", file=sys.stderr, flush=True)


@dataclass
class RunSetup:
    """Everything the steps need, ready: built by `set_up`."""

    run: Path
    device: torch.device
    loaded: LoadedModel
    model: torch.nn.Module  # the bare model (loaded.model on `device`), not the DDP/trim wrapper
    rows: TrainRows
    plan: BatchPlan
    samples: TrainSamples
    total: int  # the run's optimizer steps
    optimizer: torch.optim.Optimizer
    autocast: Callable[[], ContextManager]
    scaler: torch.amp.GradScaler | None
    start: int  # first step to run: 0, or the step of the checkpoint resumed from
    counters: dict[str, int]  # skipped images and single-sentence fallbacks so far (rank 0 holds the resumed ones)


def set_up(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> RunSetup:
    run = Path(cfg.out)
    device = device_for(cfg, local_rank)
    images = check_inputs(cfg, run, world)
    loaded, stretched = prepare_model(cfg, rank)
    model = loaded.model.to(device).train()
    rows, plan, samples = training_data(cfg, loaded, images, rank)
    total = cfg.max_steps if cfg.max_steps is not None else (cfg.epochs or 1) * plan.steps_per_epoch
    optimizer = torch.optim.AdamW(
        param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps
    )
    autocast, scaler = precision(cfg, device, rank)
    start, counters = resume(cfg, run, model, optimizer, scaler, rank)
    if rank == 0:
        resolved = {
            "world_size": world,
            "train_rows": len(rows),
            "steps_per_epoch": plan.steps_per_epoch,
            "total_steps": total,
            "context_length": loaded.context_length,
            "stretched": stretched,
            "retokenized": rows.retokenized,
            "model_info": loaded.info,
            "device": str(device),
        }
        write_run_files(run, cfg, resolved, loaded, start)
    return RunSetup(
        run, device, loaded, model, rows, plan, samples, total, optimizer, autocast, scaler, start, counters
    )


def check_inputs(cfg: TrainConfig, run: Path, world: int) -> FolderImages:
    """Everything that can be refused before the (slow) model load."""
    if cfg.batch_size % world:
        raise UserError(f"--batch-size {cfg.batch_size} must divide evenly over {world} processes")
    if cfg.image_root is None:
        raise UserError("--image-root is required (the folder the shards' `image` paths are relative to)")
    images = FolderImages(cfg.image_root)
    PreparedDataset.open(cfg.data)
    if not cfg.resume and latest_checkpoint(run) is not None:
        raise UserError(f"{run} already has checkpoints; pass --resume to continue it or choose a new --out")
    if cfg.resume:
        check_resume_config(run, cfg)
    return images


def check_resume_config(run: Path, cfg: TrainConfig) -> None:
    path = run / RUN_CONFIG
    if not path.is_file():
        return
    old = json.loads(path.read_text("utf-8")).get("config", {})
    changed = [k for k, v in cfg.to_dict().items() if k not in RESUME_FREE and k in old and old[k] != v]
    if changed:
        raise UserError(
            f"--resume with changed options ({', '.join(changed)}); use the run's own settings or a new --out"
        )


def prepare_model(cfg: TrainConfig, rank: int) -> tuple[LoadedModel, bool]:
    """Load, stretch per recipe (never twice), freeze the head, reset the logit scale."""
    torch.manual_seed(cfg.seed)  # random-init models (tiny) start identical on every rank and resume
    loaded = load_model(cfg.model, cfg.pretrained)
    model = loaded.model
    stretched = False
    if cfg.recipe in ("debias", "longclip"):
        stretched = stretch_positional_embedding(model, cfg.context_length, cfg.keep_positions, "knowledge")
        if not is_split(model):
            split_frozen_head(model, cfg.keep_positions)
        with torch.no_grad():
            model.logit_scale.fill_(LN100)
    elif cfg.recipe == "clip":
        stretched = stretch_positional_embedding(model, cfg.context_length, mode="uniform")
    loaded.set_context(model.context_length)
    if stretched:
        say(f"stretched text positions to {model.context_length} ({cfg.recipe})", rank, cfg.quiet)
    return loaded, stretched


def training_data(
    cfg: TrainConfig, loaded: LoadedModel, images: FolderImages, rank: int
) -> tuple[TrainRows, BatchPlan, TrainSamples]:
    """The rows with their token ids, the batch order, and the (epoch, row) -> sample dataset."""
    rows = load_rows(cfg.data, loaded.tokenizer, cfg.split, cfg.group_key)
    if rows.retokenized:
        say("the model's tokenizer differs from the shards': captions were re-tokenized once at load", rank, cfg.quiet)
    plan = BatchPlan(len(rows), cfg.batch_size, cfg.seed, rows.groups, cfg.group_size)
    tok = loaded.tokenizer
    # The eval transform, as Long-CLIP trains: deterministic pixels keep resume exact and allow caching.
    samples = TrainSamples(
        rows,
        images,
        loaded.preprocess,
        cfg.recipe,
        loaded.context_length,
        cfg.seed,
        DebiasOptions(cfg.drop_summary, cfg.no_drop_summary, cfg.no_subsample, cfg.no_pad),
        cfg.cache_images,
        tok.sot_token_id,
        tok.eot_token_id,
    )
    return rows, plan, samples


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """open_clip's rule: no weight decay on gains, biases, norms and the logit scale."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if skip else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def precision(
    cfg: TrainConfig, device: torch.device, rank: int
) -> tuple[Callable[[], ContextManager], torch.amp.GradScaler | None]:
    """(autocast context factory, GradScaler or None)."""
    if cfg.precision == "amp":
        if device.type == "cuda":
            scaler = torch.amp.GradScaler("cuda")
            return (lambda: torch.autocast("cuda", dtype=torch.float16)), scaler
        say(
            "--precision amp needs CUDA; training in fp32 on CPU (use --precision bf16 for CPU autocast)",
            rank,
            cfg.quiet,
        )
        return nullcontext, None
    if cfg.precision == "bf16":
        return (lambda: torch.autocast(device.type, dtype=torch.bfloat16)), None
    return nullcontext, None


def resume(
    cfg: TrainConfig,
    run: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    rank: int,
) -> tuple[int, dict[str, int]]:
    """With --resume, load the latest checkpoint into model, optimizer, scaler and RNG: (start step, counters)."""
    state = checkpoint.load_latest(run) if cfg.resume else None
    if state is None:
        if cfg.resume:
            say(f"--resume: no checkpoint in {run} yet, starting from step 0", rank, cfg.quiet)
        return 0, {"skipped": 0, "fallback": 0}
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    checkpoint.set_rng_state(state["rng"])
    start = int(state["step"])
    # The saved counters are the sums over ranks: rank 0 carries them on, the others count from 0.
    counters = {k: int(v) for k, v in state["counters"].items()} if rank == 0 else {"skipped": 0, "fallback": 0}
    say(f"resuming {run} from step {start}", rank, cfg.quiet)
    return start, counters


def write_run_files(run: Path, cfg: TrainConfig, resolved: dict[str, Any], loaded: LoadedModel, start: int) -> None:
    """RUN/config.json (options and what they resolved to), the open_clip model config, and
    metrics.jsonl cut back to the step resumed from (later lines are logged again)."""
    run.mkdir(parents=True, exist_ok=True)
    (run / RUN_CONFIG).write_text(
        json.dumps({"config": cfg.to_dict(), "resolved": resolved}, indent=2, default=str), "utf-8"
    )
    (run / RUN_MODEL_CONFIG).write_text(json.dumps(loaded.open_clip_config(), indent=2), "utf-8")
    metrics = run / METRICS
    if metrics.is_file():
        lines = metrics.read_text("utf-8").splitlines()
        keep = [line for line in lines if line.strip() and json.loads(line)["step"] <= start]
        metrics.write_text("".join(line + "\n" for line in keep), "utf-8")


class _RankBatches:
    """batch_sampler for DataLoader: this rank's (epoch, row) lists from `start` to `total` steps."""

    def __init__(self, plan: BatchPlan, start: int, total: int, rank: int, world: int):
        self.plan, self.start, self.total, self.rank, self.world = plan, start, total, rank, world

    def __iter__(self):
        return self.plan.batches(self.start, self.total, self.rank, self.world)

    def __len__(self) -> int:
        return max(0, self.total - self.start)


def data_loader(setup: RunSetup, cfg: TrainConfig, rank: int, world: int):
    """This rank's batches for steps start..total-1."""
    from torch.utils.data import DataLoader

    return DataLoader(
        setup.samples,
        batch_sampler=_RankBatches(setup.plan, setup.start, setup.total, rank, world),
        num_workers=cfg.workers,
        collate_fn=collate,
        pin_memory=setup.device.type == "cuda",
    )


def training_net(setup: RunSetup, cfg: TrainConfig, world: int) -> tuple[torch.nn.Module, bool]:
    """The module the steps call, and whether it trims text batches (each text batch then
    encoded on its own); wrapped in DistributedDataParallel over several processes."""
    trim = cfg.trim_padding and can_trim(setup.model)
    net = TrimmedCLIP(setup.model) if trim else setup.model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        device = setup.device
        net = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    return net, trim
