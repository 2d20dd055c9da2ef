"""`caption-debias curate`: images checked, duplicates and eval leaks removed, degenerate captions flagged (docs/curation.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.curate.options import CurateOptions


def curate(
    ctx: typer.Context,
    inputs: List[str] = typer.Argument(
        ...,
        help="Prepared (or curated) folders, in order: of duplicates, the earliest row is kept.",
        show_default=False,
    ),
    out: str = out_option("Output folder: shards, manifest.json and removed.jsonl (a local path or an fsspec URL)."),
    image_root: Optional[str] = from_field(CurateOptions, "image_root"),
    max_missing_images: float = from_field(CurateOptions, "max_missing_images"),
    decontaminate: List[str] = from_field(CurateOptions, "decontaminate"),
    near_duplicate_threshold: float = from_field(CurateOptions, "near_duplicate_threshold"),
    keep_duplicate_images: bool = from_field(CurateOptions, "keep_duplicate_images"),
    min_image_side: int = from_field(CurateOptions, "min_image_side"),
    embed_images: bool = from_field(CurateOptions, "embed_images"),
    duplicate_image_distance: int = from_field(CurateOptions, "duplicate_image_distance"),
    repetition_max: float = from_field(CurateOptions, "repetition_max"),
    repeated_sentences_max: int = from_field(CurateOptions, "repeated_sentences_max"),
    min_clip_score: Optional[float] = from_field(CurateOptions, "min_clip_score"),
    keep_top_alignment: Optional[float] = from_field(CurateOptions, "keep_top_alignment", metavar="P"),
    drop_ungrounded: Optional[float] = from_field(CurateOptions, "drop_ungrounded", metavar="T"),
    semantic_duplicate_threshold: Optional[float] = from_field(CurateOptions, "semantic_duplicate_threshold"),
    semantic_duplicate_center: bool = from_field(CurateOptions, "semantic_duplicate_center"),
    exclude_keys: Optional[str] = from_field(CurateOptions, "exclude_keys", metavar="FILE"),
    include_keys: Optional[str] = from_field(CurateOptions, "include_keys", metavar="FILE"),
    keep_keys: Optional[str] = from_field(CurateOptions, "keep_keys", metavar="FILE"),
    score_model: Optional[str] = from_field(CurateOptions, "score_model", metavar="SPEC"),
    score_pretrained: Optional[str] = from_field(CurateOptions, "score_pretrained"),
    score_device: str = from_field(CurateOptions, "score_device"),
    workers: int = from_field(CurateOptions, "workers"),
    engine: str = from_field(CurateOptions, "engine"),
    ray_address: Optional[str] = from_field(CurateOptions, "ray_address"),
    overwrite: bool = from_field(CurateOptions, "overwrite"),
    quiet: bool = from_field(CurateOptions, "quiet"),
    log_interval: float = from_field(CurateOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Curate prepared folders into a training set: every removed row is listed with its reason."""
    from caption_debias.curate.api import curate as run_curate

    run_curate(inputs, out, options=options_from_params(CurateOptions, ctx))
