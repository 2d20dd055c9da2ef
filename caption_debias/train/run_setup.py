"""A run's set-up: checks, model, data, optimizer, precision, resume state and the run's files.

What open_clip_train's main.py does before its epoch loop; train/loop.py calls `set_up`, then
`training_net` and `data_loader`, and from there only steps.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable, ContextManager

import torch

from caption_debias.augment import DebiasOptions
from caption_debias.errors import UserError
from caption_debias.image_source.roots import folder_root
from caption_debias.model.load import RUN_CONFIG, RUN_MODEL_CONFIG, LoadedModel, latest_checkpoint, load_model
from caption_debias.model.stretch import is_split, split_frozen_head, stretch_positional_embedding
from caption_debias.model.trim import TrimmedCLIP, can_trim
from caption_debias.progress import say
from caption_debias.train import checkpoint, precision
from caption_debias.train.config import TrainConfig
from caption_debias.train.data import (
    BatchPlan,
    FolderImages,
    RowImages,
    TrainRows,
    TrainSamples,
    collate,
    load_rows,
    open_prepared,
)
from caption_debias.train.distributed import barrier, device_for
from caption_debias.train.packed_source import PackedRows, is_packed, load_packed

METRICS = "metrics.jsonl"
LN100 = math.log(100.0)  # open_clip's bound on the logit scale: scale <= 100
# Options that may change between a run and its --resume: they change where things are, how
# fast or how the run reports, not what it computes. Any other change is refused; paths,
# the data and the batch are compared by what they mean (see `run_meaning`).
RESUME_FREE = {
    "resume",
    "quiet",
    "workers",
    "max_steps",
    "epochs",
    "checkpoint_every",
    "log_every",
    "log_interval",
    "device",
    "strict",
    "keep_checkpoints",
    "tensorboard",
    "report_to",
    "cache_images",
    "image_root",
    "out",
    "logs",
    "name",
    "grad_checkpointing",
    "torchcompile",
    "val_data",
    "val_image_root",
    "val_frequency",
    "allow_incomplete",
    "batch_size",  # compared as the global batch (with world size and --accum-freq)
    "accum_freq",
}


@dataclass
class RunSetup:
    """Everything the steps need, ready: built by `set_up`."""

    run: Path
    device: torch.device
    loaded: LoadedModel
    model: torch.nn.Module  # the bare model (loaded.model on `device`), not the DDP/trim wrapper
    rows: TrainRows | PackedRows
    plan: BatchPlan
    samples: TrainSamples
    total: int  # the run's optimizer steps
    optimizer: torch.optim.Optimizer
    autocast: Callable[[], ContextManager]
    scaler: torch.amp.GradScaler | None
    start: int  # first step to run: 0, or the step of the checkpoint resumed from
    counters: dict[str, int]  # skipped images and single-sentence fallbacks so far (rank 0 holds the resumed ones)
    rng: dict[str, Any] | None  # this rank's RNG state to restore before the first step (resumed runs)


def schedule_note(warmup: int, total: int, lr: float) -> str | None:
    """One line when the lr schedule cannot do what the options suggest: warm-up as long as the run
    (the lr never reaches --lr, and may never leave its first 10%); None for a schedule that can."""
    if total < 1 or warmup < total:
        return None
    peak = lr * total / warmup  # the linear warm-up's last step (loop.lr_at)
    share = f"{100 * total / warmup:.0f}%" if total * 10 >= warmup else f"{100 * total / warmup:.1g}%, under 10%,"
    return (
        f"schedule: --warmup-steps {warmup} >= the run's {total} steps, so the run never leaves warm-up: "
        f"the lr peaks at {peak:.3g}, {share} of --lr {lr:g}; give --warmup-steps below {total} (e.g. {total // 10})"
    )


def set_up(cfg: TrainConfig, rank: int, world: int, local_rank: int) -> RunSetup:
    assert cfg.out is not None  # train() sets it (loop.run_folder)
    run = Path(cfg.out)
    device = device_for(cfg, local_rank)
    global_batch = cfg.batch_size * world * cfg.accum_freq
    images, meaning = check_inputs(cfg, run, world, global_batch, rank)
    loaded, stretched = prepare_model(cfg, rank)
    model = loaded.model.to(device).train()
    configure_model(model, cfg)
    torch.manual_seed(cfg.seed + rank)  # as open_clip_train: each rank draws its own dropout
    rows, plan, samples = training_data(cfg, loaded, images, rank, global_batch)
    total = cfg.max_steps if cfg.max_steps is not None else (cfg.epochs or 1) * plan.steps_per_epoch
    optimizer = torch.optim.AdamW(
        param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps
    )
    autocast, use_scaler, note = precision.autocast_for(cfg.precision, device)
    if note:
        say(note, rank != 0 or cfg.quiet)
    warning = schedule_note(cfg.warmup_steps, total, cfg.lr)
    if warning:
        say(warning, rank != 0)  # even with --quiet: the run will not do what its options suggest
    scaler = torch.amp.GradScaler(device.type) if use_scaler else None
    start, counters, rng = resume(cfg, run, model, optimizer, scaler, rank, world)
    say(
        f"global batch {global_batch} = {cfg.batch_size} per process x {world} process(es) x accum-freq {cfg.accum_freq}",
        rank != 0 or cfg.quiet,
    )
    if rank == 0:
        resolved = {
            "world_size": world,
            "global_batch_size": global_batch,
            "per_process_batch_size": cfg.batch_size,
            "accum_freq": cfg.accum_freq,
            "train_rows": len(rows),
            "steps_per_epoch": plan.steps_per_epoch,
            "total_steps": total,
            "context_length": loaded.context_length,
            "stretched": stretched,
            "retokenized": rows.retokenized,
            "model_info": loaded.info,
            "device": str(device),
            "precision": precision.used(cfg.precision, device),  # what ran: amp on a CPU trains in fp32
            "schedule_note": warning,
            "data_complete": getattr(rows, "complete", True),
            **meaning,
        }
        write_run_files(run, cfg, resolved, loaded, start)
    return RunSetup(
        run, device, loaded, model, rows, plan, samples, total, optimizer, autocast, scaler, start, counters, rng
    )


def configure_model(model: torch.nn.Module, cfg: TrainConfig) -> None:
    """open_clip_train's model switches: tower locks, gradient checkpointing, weight precision."""
    if cfg.lock_image:
        model.lock_image_tower(
            unlocked_groups=cfg.lock_image_unlocked_groups, freeze_bn_stats=cfg.lock_image_freeze_bn_stats
        )
    if cfg.lock_text:
        import open_clip

        # open_clip's CLIP (text tower built in) only locks LayerNorms with their layer; CustomTextCLIP may keep them trainable
        freeze_norms = cfg.lock_text_freeze_layer_norm if isinstance(model, open_clip.CustomTextCLIP) else True
        model.lock_text_tower(unlocked_layers=cfg.lock_text_unlocked_layers, freeze_layer_norm=freeze_norms)
        parametrized = getattr(model, "parametrizations", None)
        if parametrized is not None and "positional_embedding" in parametrized:
            # the stretched table is a parametrization (model/stretch.py), which open_clip's lock does not see:
            # it follows the token embedding, as in open_clip's embedding group
            parametrized.positional_embedding.original.requires_grad_(model.token_embedding.weight.requires_grad)
    if cfg.grad_checkpointing:
        model.set_grad_checkpointing(True)
    precision.convert_model(model, cfg.precision)


def check_inputs(
    cfg: TrainConfig, run: Path, world: int, global_batch: int, rank: int
) -> tuple[FolderImages | None, dict[str, Any]]:
    """Everything that can be refused before the (slow) model load. Returns the image source of
    a prepared folder (None for a packed folder, `caption-debias pack`, whose tars hold the
    images) and what the run's paths and data mean (stored in config.json, compared on resume)."""
    if global_batch < 2:
        raise UserError(
            f"global batch {global_batch} (--batch-size x processes x --accum-freq) must be >= 2: "
            "a contrastive loss needs negatives"
        )
    assert cfg.data is not None  # TrainConfig.check
    if is_packed(cfg.data):
        from caption_debias.pack.folder import PackedFolder

        images, manifest = None, PackedFolder(cfg.data).manifest
    else:
        manifest = open_prepared(cfg.data, cfg.allow_incomplete).manifest  # an unfinished folder says so first
        root = folder_root(cfg.data, cfg.image_root, manifest)  # the one rule: given > recorded > lineage
        cfg.image_root = None if root is None else root.resolved  # config.json records it
        if cfg.image_root is None:
            raise UserError(
                "--image-root is required: the data's manifest records none "
                "(the folder the shards' `image` paths are relative to)"
            )
        images = FolderImages(cfg.image_root)
        if manifest.get("complete") is False:
            say(f"{cfg.data}: incomplete prepared folder, training anyway (--allow-incomplete)", rank != 0 or cfg.quiet)
    if cfg.resume is None and latest_checkpoint(run) is not None:
        raise UserError(f"{run} already has checkpoints; pass --resume latest to continue it or choose a new --out")
    meaning = run_meaning(cfg, manifest, global_batch)
    if rank == 0:
        for tmp in checkpoint.remove_stale_temporaries(run):
            say(f"removed {tmp.name}, a checkpoint a stopped run had not finished writing", rank != 0 or cfg.quiet)
    if cfg.resume is not None:
        own = run / RUN_CONFIG
        if cfg.resume != "latest":
            if not Path(cfg.resume).is_file():
                raise UserError(f"--resume {cfg.resume}: no such checkpoint file (or give `latest`)")
            # a checkpoint of another run folder is checked against that run's options
            other = Path(cfg.resume).parent.parent / RUN_CONFIG
            own = other if other.is_file() else own
        check_resume_config(own, cfg, meaning, world)
    return images, meaning


def _real(path: str | None) -> str | None:
    """A path as the file system resolves it (relative to here, through symlinks); anything else as is."""
    if not path:
        return path
    prefix = "local-dir:" if str(path).startswith("local-dir:") else ""
    bare = str(path)[len(prefix) :]
    return prefix + os.path.realpath(bare) if os.path.exists(bare) else str(path)


def data_fingerprint(manifest: dict[str, Any]) -> str | None:
    """sha256 over the shards' (or a packed folder's tars') (path, rows, sha256): the same data
    wherever the folder lies."""
    shards = manifest.get("shards") or manifest.get("tars") or []
    if not shards or not all(isinstance(s, dict) and s.get("sha256") for s in shards):
        return None
    listed = sorted((str(s["path"]), int(s.get("rows", s.get("samples", 0))), str(s["sha256"])) for s in shards)
    return hashlib.sha256(json.dumps(listed).encode()).hexdigest()


def run_meaning(cfg: TrainConfig, manifest: dict[str, Any], global_batch: int) -> dict[str, Any]:
    """What the run's spelled options stand for: resolved paths, the data's content, the global batch."""
    return {
        "paths": {"data": _real(cfg.data), "model": _real(cfg.model), "pretrained": _real(cfg.pretrained)},
        "data_fingerprint": data_fingerprint(manifest),
        "global_batch_size": global_batch,
    }


def _comparable(config: dict[str, Any], resolved: dict[str, Any]) -> dict[str, Any]:
    """The options of a run as its --resume compares them. Runs written before the batch became
    per process (no global_batch_size recorded) stored the global batch as batch_size, and
    `bf16` meant bf16 autocast (now `amp_bf16`)."""
    new_style = "global_batch_size" in resolved
    view = {k: v for k, v in config.items() if k not in RESUME_FREE}
    prec = str(view.get("precision", ""))
    view["precision"] = precision.canonical(prec if new_style or prec != "bf16" else "amp_bf16")
    view["global_batch_size"] = resolved.get("global_batch_size", config.get("batch_size"))
    paths = resolved.get("paths") or {}
    for key in ("model", "pretrained"):  # runs without resolved paths: as this directory resolves them
        view[key] = paths[key] if key in paths else _real(config.get(key))
    view["data"] = resolved.get("data_fingerprint") or paths.get("data") or config.get("data")
    return view


def check_resume_config(path: Path, cfg: TrainConfig, meaning: dict[str, Any], world: int) -> None:
    """Refuse a --resume whose options would change what the run computes; notes for the rest."""
    if not path.is_file():
        return
    saved = json.loads(path.read_text("utf-8"))
    old_cfg, old_resolved = saved.get("config", {}), saved.get("resolved", {})
    # an option the run's config.json does not know yet had its default then
    old_cfg = {**{f.name: f.default for f in fields(TrainConfig)}, **old_cfg}
    old = _comparable(old_cfg, old_resolved)
    if not old_resolved.get("data_fingerprint") or not meaning["data_fingerprint"]:
        # no content digest on one side: compare the data folder as the file system resolves it
        old["data"] = (old_resolved.get("paths") or {}).get("data") or _real(old_cfg.get("data"))
        new = _comparable(cfg.to_dict(), {**meaning, "data_fingerprint": None})
    else:
        new = _comparable(cfg.to_dict(), meaning)
    changed = sorted(k for k in new if k in old and old[k] != new[k])
    if changed:
        names = ["data (another prepared folder, or its contents changed)" if k == "data" else k for k in changed]
        raise UserError(
            f"--resume with changed options ({', '.join(names)}); use the run's own settings or a new --out"
        )
    old_world = old_resolved.get("world_size")
    if old_world and old_world != world:
        say(
            f"--resume on {world} process(es), the run had {old_world}: same global batch and data order; "
            "the per-device batch (and so the PCA term's batch) changes, so the run is not bit-identical",
            cfg.quiet,
        )


def prepare_model(cfg: TrainConfig, rank: int) -> tuple[LoadedModel, bool]:
    """Load, stretch per recipe (never twice), freeze the head, reset the logit scale."""
    torch.manual_seed(cfg.seed)  # random-init models (tiny) start identical on every rank and resume
    loaded = load_model(cfg.model, cfg.pretrained, tell=lambda text: say(text, rank != 0 or cfg.quiet))
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
        say(f"stretched text positions to {model.context_length} ({cfg.recipe})", rank != 0 or cfg.quiet)
    return loaded, stretched


def training_data(
    cfg: TrainConfig, loaded: LoadedModel, images: RowImages | None, rank: int, global_batch: int
) -> tuple[TrainRows | PackedRows, BatchPlan, TrainSamples]:
    """The rows with their token ids, the batch order, and the (epoch, row) -> sample dataset."""
    assert cfg.data is not None  # TrainConfig.check
    rows: TrainRows | PackedRows
    if images is None:  # a packed folder: rows, ids and images from its tars
        rows, images = load_packed(cfg.data, loaded.tokenizer, cfg.split, cfg.group_key)
        retokenized = "sentences are re-tokenized as each sample is read"
        if cfg.image_root is not None:
            say(
                f"{cfg.data} is a packed folder: its tars hold the images, --image-root is not used",
                rank != 0 or cfg.quiet,
            )
    else:
        rows = load_rows(cfg.data, loaded.tokenizer, cfg.split, cfg.group_key, cfg.allow_incomplete)
        retokenized = "captions were re-tokenized once at load"
    if rows.retokenized:
        say(f"the model's tokenizer differs from the shards': {retokenized}", rank != 0 or cfg.quiet)
    if rows.groups is not None and cfg.batch_size % cfg.group_size:
        raise UserError(
            f"--batch-size {cfg.batch_size} (per process) must be a multiple of --group-size {cfg.group_size}"
        )
    plan = BatchPlan(len(rows), global_batch, cfg.seed, rows.groups, cfg.group_size)
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
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.ndim < 2 or "bn" in name or "ln" in name or "bias" in name or "logit_scale" in name
        (no_decay if skip else decay).append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


def resume(
    cfg: TrainConfig,
    run: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    rank: int,
    world: int,
) -> tuple[int, dict[str, int], dict[str, Any] | None]:
    """With --resume, load the checkpoint into model, optimizer and scaler:
    (start step, counters, this rank's RNG state to restore once the data loader is running)."""
    state = None
    if cfg.resume == "latest":
        if rank == 0:
            state = checkpoint.newest_for_resume(run, set_aside=True)
        barrier(world)  # rank 0 has set damaged checkpoints aside; the others read after it
        if rank != 0:
            state = checkpoint.newest_for_resume(run, set_aside=False)
    elif cfg.resume is not None:
        state = checkpoint.read_for_resume(cfg.resume)
    if state is None:
        if cfg.resume:
            say(f"--resume: no checkpoint in {run} yet, starting from step 0", rank != 0 or cfg.quiet)
        return 0, {"skipped": 0, "fallback": 0}, None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    start = int(state["step"])
    # The saved counters are the sums over ranks: rank 0 carries them on, the others count from 0.
    counters = {k: int(v) for k, v in state["counters"].items()} if rank == 0 else {"skipped": 0, "fallback": 0}
    say(f"resuming {run} from step {start}", rank != 0 or cfg.quiet)
    return start, counters, checkpoint.rank_rng_state(state["rng"], rank)


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
    """batch_sampler for DataLoader: this rank's (epoch, row) lists from `start` to `total` steps,
    `accum` micro-batches per step."""

    def __init__(self, plan: BatchPlan, start: int, total: int, rank: int, world: int, accum: int):
        self.plan, self.start, self.total, self.rank, self.world, self.accum = plan, start, total, rank, world, accum

    def __iter__(self):
        return self.plan.batches(self.start, self.total, self.rank, self.world, self.accum)

    def __len__(self) -> int:
        return max(0, self.total - self.start) * self.accum


def data_loader(setup: RunSetup, cfg: TrainConfig, rank: int, world: int):
    """This rank's micro-batches for steps start..total-1. The loader draws from its own
    generator, so making its iterator leaves the global RNG (dropout's) where the run left it."""
    from torch.utils.data import DataLoader

    return DataLoader(
        setup.samples,
        batch_sampler=_RankBatches(setup.plan, setup.start, setup.total, rank, world, cfg.accum_freq),
        num_workers=cfg.workers,
        collate_fn=collate,
        pin_memory=setup.device.type == "cuda",
        generator=torch.Generator().manual_seed(cfg.seed),
    )


def training_net(setup: RunSetup, cfg: TrainConfig, world: int) -> tuple[torch.nn.Module, bool]:
    """The module the steps call, and whether it trims text batches (each text batch then
    encoded on its own); wrapped in DistributedDataParallel over several processes, compiled
    with --torchcompile."""
    trim = cfg.trim_padding and can_trim(setup.model)
    net = TrimmedCLIP(setup.model) if trim else setup.model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        device = setup.device
        net = DistributedDataParallel(
            net, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
        )
    if cfg.torchcompile:
        if cfg.grad_checkpointing and world > 1:
            torch._dynamo.config.optimize_ddp = False  # as open_clip_train: compile + checkpointing under DDP
        net = torch.compile(net)  # checkpoints save setup.model, the module it wraps: no _orig_mod. prefix
    return net, trim
