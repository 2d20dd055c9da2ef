"""`caption-debias train`: parse options (and --config), call the library.

Every option's flag, default, help and limits come from its TrainConfig field (train/config.py),
so the command line, config files and the Python API share one definition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params
from caption_debias.errors import UserError
from caption_debias.options import fields_of
from caption_debias.train.config import TrainConfig, older_keys


def train(
    ctx: typer.Context,
    data: Optional[str] = typer.Argument(None, help=fields_of(TrainConfig)["data"].metadata["help"]),
    image_root: Optional[str] = from_field(TrainConfig, "image_root"),
    model: str = from_field(TrainConfig, "model"),
    pretrained: Optional[str] = from_field(TrainConfig, "pretrained"),
    recipe: str = from_field(TrainConfig, "recipe"),
    out: Optional[Path] = from_field(TrainConfig, "out"),
    logs: Optional[Path] = from_field(TrainConfig, "logs"),
    name: Optional[str] = from_field(TrainConfig, "name"),
    split: Optional[str] = from_field(TrainConfig, "split"),
    epochs: Optional[int] = from_field(TrainConfig, "epochs"),
    max_steps: Optional[int] = from_field(TrainConfig, "max_steps"),
    batch_size: int = from_field(TrainConfig, "batch_size"),
    accum_freq: int = from_field(TrainConfig, "accum_freq"),
    lr: float = from_field(TrainConfig, "lr"),
    weight_decay: float = from_field(TrainConfig, "weight_decay"),
    beta1: float = from_field(TrainConfig, "beta1"),
    beta2: float = from_field(TrainConfig, "beta2"),
    eps: float = from_field(TrainConfig, "eps"),
    warmup_steps: int = from_field(TrainConfig, "warmup_steps"),
    grad_clip: Optional[float] = from_field(TrainConfig, "grad_clip"),
    lambda_short: float = from_field(TrainConfig, "lambda_short"),
    pca_dim: int = from_field(TrainConfig, "pca_dim"),
    keep_positions: int = from_field(TrainConfig, "keep_positions"),
    context_length: int = from_field(TrainConfig, "context_length"),
    drop_summary: str = from_field(TrainConfig, "drop_summary"),
    no_drop_summary: bool = from_field(TrainConfig, "no_drop_summary"),
    no_subsample: bool = from_field(TrainConfig, "no_subsample"),
    no_pad: bool = from_field(TrainConfig, "no_pad"),
    label_smoothing: float = from_field(TrainConfig, "label_smoothing"),
    precision: str = from_field(TrainConfig, "precision"),
    workers: int = from_field(TrainConfig, "workers"),
    seed: int = from_field(TrainConfig, "seed"),
    resume: Optional[str] = from_field(TrainConfig, "resume"),
    strict: bool = from_field(TrainConfig, "strict"),
    checkpoint_every: int = from_field(TrainConfig, "checkpoint_every"),
    keep_checkpoints: int = from_field(TrainConfig, "keep_checkpoints"),
    log_every: int = from_field(TrainConfig, "log_every"),
    log_interval: float = from_field(TrainConfig, "log_interval"),
    group_key: Optional[str] = from_field(TrainConfig, "group_key"),
    group_size: int = from_field(TrainConfig, "group_size"),
    cache_images: bool = from_field(TrainConfig, "cache_images"),
    grad_checkpointing: bool = from_field(TrainConfig, "grad_checkpointing"),
    lock_image: bool = from_field(TrainConfig, "lock_image"),
    lock_image_unlocked_groups: int = from_field(TrainConfig, "lock_image_unlocked_groups"),
    lock_image_freeze_bn_stats: bool = from_field(TrainConfig, "lock_image_freeze_bn_stats"),
    lock_text: bool = from_field(TrainConfig, "lock_text"),
    lock_text_unlocked_layers: int = from_field(TrainConfig, "lock_text_unlocked_layers"),
    lock_text_freeze_layer_norm: bool = from_field(TrainConfig, "lock_text_freeze_layer_norm"),
    torchcompile: bool = from_field(TrainConfig, "torchcompile"),
    val_data: Optional[str] = from_field(TrainConfig, "val_data"),
    val_image_root: Optional[str] = from_field(TrainConfig, "val_image_root"),
    val_frequency: int = from_field(TrainConfig, "val_frequency"),
    allow_incomplete: bool = from_field(TrainConfig, "allow_incomplete"),
    trim_padding: bool = from_field(TrainConfig, "trim_padding"),
    device: str = from_field(TrainConfig, "device"),
    report_to: str = from_field(TrainConfig, "report_to"),
    wandb_project_name: str = from_field(TrainConfig, "wandb_project_name"),
    quiet: bool = from_field(TrainConfig, "quiet"),
    no_tensorboard: bool = typer.Option(
        False, "--no-tensorboard", hidden=True, help="Older spelling: leave tensorboard out of --report-to."
    ),
    config: Optional[Path] = config_option(translate=older_keys),
) -> None:
    """Fine-tune an open_clip model on a prepared folder (DeBias-CLIP, Long-CLIP or plain CLIP)."""
    from caption_debias.train.api import train as run_train

    given: dict[str, str | None] = {}
    if no_tensorboard:
        given["report_to"] = ",".join(r for r in report_to.split(",") if r.strip() != "tensorboard")
    if grad_clip == 0:  # "0 turns it off"
        given["grad_clip"] = None
    if not data:
        raise UserError("missing DATA (a prepared folder), on the command line or in --config")
    result = run_train(options=options_from_params(TrainConfig, ctx, **given))
    if not quiet:
        typer.echo(str(result.out))
