"""`caption-debias curate`: images checked, duplicates and eval leaks removed, degenerate captions flagged (docs/curation.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, out_option
from caption_debias.curate.options import CurateOptions


def curate(
    inputs: List[str] = typer.Argument(
        ...,
        help="Prepared (or curated) folders, in order: of duplicates, the earliest row is kept.",
        show_default=False,
    ),
    out: str = out_option("Output folder: shards, manifest.json and removed.jsonl (a local path or an fsspec URL)."),
    image_root: Optional[Path] = from_field(CurateOptions, "image_root"),
    decontaminate: List[str] = from_field(CurateOptions, "decontaminate"),
    near_duplicate_threshold: float = from_field(CurateOptions, "near_duplicate_threshold"),
    keep_duplicate_images: bool = from_field(CurateOptions, "keep_duplicate_images"),
    min_image_side: int = from_field(CurateOptions, "min_image_side", min=0),
    embed_images: bool = from_field(CurateOptions, "embed_images"),
    duplicate_image_distance: int = from_field(CurateOptions, "duplicate_image_distance", min=0, max=63),
    repetition_max: float = from_field(CurateOptions, "repetition_max"),
    repeated_sentences_max: int = from_field(CurateOptions, "repeated_sentences_max", min=0),
    min_clip_score: Optional[float] = from_field(CurateOptions, "min_clip_score"),
    keep_top_alignment: Optional[float] = from_field(CurateOptions, "keep_top_alignment", metavar="P"),
    drop_ungrounded: Optional[float] = from_field(CurateOptions, "drop_ungrounded", metavar="T"),
    semantic_duplicate_threshold: Optional[float] = from_field(CurateOptions, "semantic_duplicate_threshold"),
    semantic_duplicate_center: bool = from_field(
        CurateOptions, "semantic_duplicate_center", "--semantic-duplicate-center/--no-semantic-duplicate-center"
    ),
    score_model: Optional[str] = from_field(CurateOptions, "score_model", metavar="SPEC"),
    score_pretrained: Optional[str] = from_field(CurateOptions, "score_pretrained"),
    score_device: str = from_field(CurateOptions, "score_device"),
    workers: int = from_field(CurateOptions, "workers", "--workers", "-j", min=1),
    engine: str = from_field(CurateOptions, "engine"),
    ray_address: Optional[str] = from_field(CurateOptions, "ray_address"),
    overwrite: bool = from_field(CurateOptions, "overwrite"),
    quiet: bool = from_field(CurateOptions, "quiet", "--quiet", "-q"),
    log_interval: float = from_field(CurateOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Curate prepared folders into a training set: every removed row is listed with its reason."""
    from caption_debias.curate.run import curate as run_curate

    options = CurateOptions(
        image_root=str(image_root) if image_root else None,
        decontaminate=list(decontaminate),
        near_duplicate_threshold=near_duplicate_threshold,
        keep_duplicate_images=keep_duplicate_images,
        min_image_side=min_image_side,
        embed_images=embed_images,
        duplicate_image_distance=duplicate_image_distance,
        repetition_max=repetition_max,
        repeated_sentences_max=repeated_sentences_max,
        min_clip_score=min_clip_score,
        keep_top_alignment=keep_top_alignment,
        drop_ungrounded=drop_ungrounded,
        semantic_duplicate_threshold=semantic_duplicate_threshold,
        semantic_duplicate_center=semantic_duplicate_center,
        score_model=score_model,
        score_pretrained=score_pretrained,
        score_device=score_device,
        workers=workers,
        engine=engine,
        ray_address=ray_address,
        overwrite=overwrite,
        quiet=quiet,
        log_interval=log_interval,
    )
    run_curate([str(p) for p in inputs], out, options)
