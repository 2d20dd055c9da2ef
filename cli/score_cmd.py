"""`caption-debias score`: model signals per row (docs/curation.md, "Model signals").

Every option's default and help text come from its ScoreOptions field (score/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.score.options import ScoreOptions


def score(
    ctx: typer.Context,
    inputs: List[str] = typer.Argument(
        ..., help="Prepared (or curated) folders, scored in order as one input.", show_default=False
    ),
    out: str = out_option(
        "Output folder: shards with the score columns, manifest.json (with the model's identity) and removed.jsonl.",
    ),
    model: str = from_field(ScoreOptions, "model"),
    pretrained: Optional[str] = from_field(ScoreOptions, "pretrained"),
    image_root: Optional[str] = from_field(ScoreOptions, "image_root"),
    max_missing_images: float = from_field(ScoreOptions, "max_missing_images"),
    batch_size: int = from_field(ScoreOptions, "batch_size"),
    device: str = from_field(ScoreOptions, "device"),
    precision: str = from_field(ScoreOptions, "precision"),
    workers: int = from_field(ScoreOptions, "workers"),
    engine: str = from_field(ScoreOptions, "engine"),
    ray_address: Optional[str] = from_field(ScoreOptions, "ray_address"),
    keep_embeddings: bool = from_field(ScoreOptions, "keep_embeddings"),
    reference_images: int = from_field(ScoreOptions, "reference_images"),
    seed: int = from_field(ScoreOptions, "seed"),
    draft_decode: bool = from_field(ScoreOptions, "draft_decode"),
    decode_threads: int = from_field(ScoreOptions, "decode_threads"),
    overwrite: bool = from_field(ScoreOptions, "overwrite"),
    quiet: bool = from_field(ScoreOptions, "quiet"),
    log_interval: float = from_field(ScoreOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Score every row with an open_clip model: image-caption alignment, per-sentence scores and grounding."""
    from caption_debias.score.api import score as run_score

    run_score(inputs, out, options=options_from_params(ScoreOptions, ctx))
