"""`caption-debias train`: parse options, resolve them with --config, call the library.

Every option's default and help text come from its TrainConfig field (train/config.py), so
the command line, config files and library use share one definition.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

import typer

from caption_debias.cli.common import config_option, given_on_command_line
from caption_debias.errors import UserError
from caption_debias.train.config import TrainConfig, older_keys

_FIELDS = {f.name: f for f in fields(TrainConfig)}
CLI_ONLY = {"config", "no_tensorboard"}  # not training options themselves


def _option(name: str, *flags: str) -> Any:
    """typer.Option for TrainConfig field `name`: default and help from the field, flag --name-with-dashes."""
    f = _FIELDS[name]
    return typer.Option(f.default, *(flags or (f"--{name.replace('_', '-')}",)), help=f.metadata["help"])


def train(
    ctx: typer.Context,
    data: Optional[str] = typer.Argument(_FIELDS["data"].default, help=_FIELDS["data"].metadata["help"]),
    image_root: Optional[Path] = _option("image_root"),
    model: str = _option("model"),
    pretrained: Optional[str] = _option("pretrained"),
    recipe: str = _option("recipe"),
    out: Optional[Path] = _option("out", "--out", "-o"),
    logs: Optional[Path] = _option("logs"),
    name: Optional[str] = _option("name"),
    split: Optional[str] = _option("split"),
    epochs: Optional[int] = _option("epochs"),
    max_steps: Optional[int] = _option("max_steps"),
    batch_size: int = _option("batch_size"),
    accum_freq: int = _option("accum_freq"),
    lr: float = _option("lr"),
    weight_decay: float = _option("weight_decay", "--wd", "--weight-decay"),
    beta1: float = _option("beta1"),
    beta2: float = _option("beta2"),
    eps: float = _option("eps"),
    warmup_steps: int = _option("warmup_steps", "--warmup", "--warmup-steps"),
    grad_clip: Optional[float] = _option("grad_clip", "--grad-clip-norm", "--grad-clip"),
    lambda_short: float = _option("lambda_short"),
    pca_dim: int = _option("pca_dim"),
    keep_positions: int = _option("keep_positions"),
    context_length: int = _option("context_length"),
    drop_summary: str = _option("drop_summary"),
    no_drop_summary: bool = _option("no_drop_summary"),
    no_subsample: bool = _option("no_subsample"),
    no_pad: bool = _option("no_pad"),
    label_smoothing: float = _option("label_smoothing"),
    precision: str = _option("precision"),
    workers: int = _option("workers", "--workers", "-j"),
    seed: int = _option("seed"),
    resume: Optional[str] = _option("resume"),
    strict: bool = _option("strict"),
    checkpoint_every: int = _option("checkpoint_every"),
    keep_checkpoints: int = _option("keep_checkpoints"),
    log_every: int = _option("log_every", "--log-every", "--log-every-n-steps"),
    log_interval: float = _option("log_interval"),
    group_key: Optional[str] = _option("group_key"),
    group_size: int = _option("group_size"),
    cache_images: bool = _option("cache_images"),
    grad_checkpointing: bool = _option("grad_checkpointing"),
    lock_image: bool = _option("lock_image"),
    lock_image_unlocked_groups: int = _option("lock_image_unlocked_groups"),
    lock_image_freeze_bn_stats: bool = _option("lock_image_freeze_bn_stats"),
    lock_text: bool = _option("lock_text"),
    lock_text_unlocked_layers: int = _option("lock_text_unlocked_layers"),
    lock_text_freeze_layer_norm: bool = _option("lock_text_freeze_layer_norm"),
    torchcompile: bool = _option("torchcompile"),
    val_data: Optional[str] = _option("val_data"),
    val_image_root: Optional[Path] = _option("val_image_root"),
    val_frequency: int = _option("val_frequency"),
    allow_incomplete: bool = _option("allow_incomplete"),
    trim_padding: bool = _option("trim_padding", "--trim-padding/--no-trim-padding"),
    device: str = _option("device"),
    report_to: str = _option("report_to"),
    wandb_project_name: str = _option("wandb_project_name"),
    quiet: bool = _option("quiet", "--quiet", "-q"),
    no_tensorboard: bool = typer.Option(
        False, "--no-tensorboard", hidden=True, help="Older spelling: leave tensorboard out of --report-to."
    ),
    config: Optional[Path] = config_option(translate=older_keys),
) -> None:
    """Fine-tune an open_clip model on a prepared folder (DeBias-CLIP, Long-CLIP or plain CLIP)."""
    from caption_debias.train.config import resolve

    values = {k: v for k, v in ctx.params.items() if k not in CLI_ONLY}
    values = {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}
    explicit = {k for k in values if given_on_command_line(ctx, k)}
    if no_tensorboard:
        values["report_to"] = ",".join(r for r in values["report_to"].split(",") if r.strip() != "tensorboard")
        explicit.add("report_to")
    if values.get("grad_clip") == 0:
        values["grad_clip"] = None
    cfg = resolve(values, explicit, None)  # --config is already in `values` (cli/common.py config_option)
    if not cfg.data:
        raise UserError("missing DATA (a prepared folder), on the command line or in --config")
    from caption_debias.train.start import announce

    announce(cfg.validate())  # checked, then said, before torch is imported: the first line within seconds
    from caption_debias.train.loop import train as run_train

    run = run_train(cfg)
    if not cfg.quiet:
        typer.echo(str(run))
