"""`caption-debias train`: parse options, resolve them with --config, call the library."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.errors import UserError


def train(
    ctx: typer.Context,
    data: Optional[Path] = typer.Argument(
        None, help="Prepared folder (output of `caption-debias prepare`); may come from --config."
    ),
    image_root: Optional[Path] = typer.Option(
        None, "--image-root", help="Folder the shards' `image` paths are relative to."
    ),
    model: str = typer.Option(
        "ViT-B-16",
        "--model",
        help="open_clip model name (or `tiny`), local-dir:DIR, hf-hub:ORG/REPO, a checkpoint file, or a run folder.",
    ),
    pretrained: Optional[str] = typer.Option(
        None,
        "--pretrained",
        help="Pretrained tag (e.g. openai) or checkpoint file; for a checkpoint-file --model, its architecture name.",
    ),
    recipe: str = typer.Option(
        "debias", "--recipe", help="debias | longclip | clip | short (stage-1 one-sentence pretraining)."
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Run folder: config.json, metrics.jsonl, checkpoints/, tensorboard/."
    ),
    split: Optional[str] = typer.Option(None, "--split", help="Train only on rows of this split."),
    epochs: Optional[int] = typer.Option(
        None, "--epochs", help="Passes over the data (default 1 unless --max-steps is given)."
    ),
    max_steps: Optional[int] = typer.Option(
        None,
        "--max-steps",
        help="Optimizer steps; 0 writes the starting (stretched, untrained) model as the checkpoint.",
    ),
    batch_size: int = typer.Option(256, "--batch-size", help="Global batch size (all processes together)."),
    lr: float = typer.Option(1e-6, "--lr", help="Peak learning rate (AdamW)."),
    weight_decay: float = typer.Option(
        0.01, "--weight-decay", help="AdamW weight decay (not on gains, biases, logit scale)."
    ),
    warmup_steps: int = typer.Option(200, "--warmup-steps", help="Linear warm-up steps before the cosine decay to 0."),
    grad_clip: Optional[float] = typer.Option(
        1.0, "--grad-clip", help="Clip the global gradient norm to this (0 turns it off)."
    ),
    lambda_short: float = typer.Option(
        0.1, "--lambda-short", help="debias: weight of the augmented-caption loss (lambda_s)."
    ),
    pca_dim: int = typer.Option(
        32, "--pca-dim", help="Primary components kept of the per-device batch of image features."
    ),
    keep_positions: int = typer.Option(
        20, "--keep-positions", help="Text positions kept as they are (and frozen) when stretching."
    ),
    context_length: int = typer.Option(
        248, "--context-length", help="Text context after stretching (248 = Long-CLIP)."
    ),
    drop_summary: str = typer.Option(
        "first", "--drop-summary", help="debias: drop the first sentence (paper) or the `detected` summary sentences."
    ),
    no_drop_summary: bool = typer.Option(
        False, "--no-drop-summary", help="Ablation: keep the summary in the augmented caption."
    ),
    no_subsample: bool = typer.Option(
        False, "--no-subsample", help="Ablation: keep every remaining sentence, in order."
    ),
    no_pad: bool = typer.Option(False, "--no-pad", help="Ablation: no pads moved after the start token."),
    label_smoothing: float = typer.Option(
        0.1, "--label-smoothing", help="Label smoothing of the contrastive loss (not used by `short`)."
    ),
    precision: str = typer.Option("amp", "--precision", help="amp (fp16 autocast, CUDA only) | bf16 | fp32."),
    workers: int = typer.Option(0, "--workers", help="DataLoader worker processes (0: load in the main process)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the data order, the augmentations and random initialisation."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its latest checkpoint."),
    strict: bool = typer.Option(
        False, "--strict", help="Stop at the first missing or corrupt image instead of skipping it."
    ),
    checkpoint_every: int = typer.Option(
        1000, "--checkpoint-every", help="Save a checkpoint every N steps (and at the end)."
    ),
    keep_checkpoints: int = typer.Option(2, "--keep-checkpoints", help="Most recent checkpoints kept (0 keeps all)."),
    log_every: int = typer.Option(10, "--log-every", help="Write a metrics.jsonl line every N steps."),
    group_key: Optional[str] = typer.Option(
        None, "--group-key", help="Key in each row's meta: batches hold whole groups sharing it (hard negatives)."
    ),
    group_size: int = typer.Option(4, "--group-size", help="Rows per group in a batch with --group-key."),
    cache_images: bool = typer.Option(
        False, "--cache-images", help="Keep decoded images in memory (small sets, --workers 0)."
    ),
    trim_padding: bool = typer.Option(
        True,
        "--trim-padding/--no-trim-padding",
        help="Cut each text batch after its latest end token: same features, less compute.",
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda | cuda:N (torchrun picks cuda:LOCAL_RANK)."),
    tensorboard: bool = typer.Option(
        True, "--tensorboard/--no-tensorboard", help="Write TensorBoard logs to RUN/tensorboard."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or notes."),
    config: Optional[Path] = typer.Option(
        None, "--config", help="TOML or YAML file with the same keys; options given here win."
    ),
) -> None:
    """Fine-tune an open_clip model on a prepared folder (DeBias-CLIP, Long-CLIP or plain CLIP)."""
    from caption_debias.train.config import resolve
    from caption_debias.train.loop import train as run_train

    values = {k: v for k, v in ctx.params.items() if k != "config"}
    values = {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}
    # Typer vendors its own click, so compare the source by name, not by enum identity.
    explicit = {
        k for k in values if getattr(ctx.get_parameter_source(k), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")
    }
    if values.get("grad_clip") == 0:
        values["grad_clip"] = None
    cfg = resolve(values, explicit, str(config) if config else None)
    if not cfg.data:
        raise UserError("missing DATA (a prepared folder), on the command line or in --config")
    run = run_train(cfg)
    typer.echo(str(run))
