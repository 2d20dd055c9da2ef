"""`caption-debias curate`: images checked, duplicates and eval leaks removed, degenerate captions flagged (docs/curation.md)."""

from __future__ import annotations

from typing import List, Optional

import typer

from caption_debias.curate.options import default_of, help_of


def curate(
    inputs: List[str] = typer.Argument(
        ...,
        help="Prepared (or curated) folders, in order: of duplicates, the earliest row is kept.",
        show_default=False,
    ),
    out: str = typer.Option(
        ...,
        "--out",
        "-o",
        help="Output folder: shards, manifest.json and removed.jsonl (a local path or an fsspec URL).",
    ),
    image_root: Optional[str] = typer.Option(
        None,
        "--image-root",
        help="Folder the rows' image paths are relative to: images are opened, checked, hashed and compared.",
    ),
    decontaminate: List[str] = typer.Option(
        [],
        "--decontaminate",
        help="NAME=PATH of an eval set (any `eval --benchmark` name and its layout); repeatable. Its images and captions are removed from the output.",
    ),
    near_duplicate_threshold: float = typer.Option(
        0.8,
        "--near-duplicate-threshold",
        help="Estimated Jaccard similarity of caption n-gram sets that makes a near-duplicate.",
    ),
    keep_duplicate_images: bool = typer.Option(
        False,
        "--keep-duplicate-images",
        help="Keep every caption of a repeated image (identical image-caption pairs still go).",
    ),
    min_image_side: int = typer.Option(
        32, "--min-image-side", min=0, help="Remove images whose shorter side is below this (pixels)."
    ),
    embed_images: bool = typer.Option(
        False,
        "--embed-images",
        help="Also store each kept image's bytes in the shards (image_bytes); needs --image-root.",
    ),
    duplicate_image_distance: int = typer.Option(
        default_of("duplicate_image_distance"), "--duplicate-image-distance", help=help_of("duplicate_image_distance")
    ),
    repetition_max: float = typer.Option(
        default_of("repetition_max"), "--repetition-max", help=help_of("repetition_max")
    ),
    repeated_sentences_max: int = typer.Option(
        default_of("repeated_sentences_max"), "--repeated-sentences-max", help=help_of("repeated_sentences_max")
    ),
    min_clip_score: Optional[float] = typer.Option(None, "--min-clip-score", help=help_of("min_clip_score")),
    keep_top_alignment: Optional[float] = typer.Option(
        None, "--keep-top-alignment", metavar="P", help=help_of("keep_top_alignment")
    ),
    drop_ungrounded: Optional[float] = typer.Option(
        None, "--drop-ungrounded", metavar="T", help=help_of("drop_ungrounded")
    ),
    semantic_duplicate_threshold: Optional[float] = typer.Option(
        None, "--semantic-duplicate-threshold", help=help_of("semantic_duplicate_threshold")
    ),
    score_model: Optional[str] = typer.Option(None, "--score-model", metavar="SPEC", help=help_of("score_model")),
    score_pretrained: Optional[str] = typer.Option(None, "--score-pretrained", help=help_of("score_pretrained")),
    score_device: str = typer.Option(default_of("score_device"), "--score-device", help=help_of("score_device")),
    workers: int = typer.Option(
        1, "--workers", "-j", min=1, help="Worker processes (output is identical for any value)."
    ),
    engine: str = typer.Option("local", "--engine", help="local (process pool) or ray (Ray Data; same output)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster to join with --engine ray."),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete an earlier run in --out and start over (default: resume it)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No summary."),
) -> None:
    """Curate prepared folders into a training set: every removed row is listed with its reason."""
    from caption_debias.curate.options import CurateOptions
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
        score_model=score_model,
        score_pretrained=score_pretrained,
        score_device=score_device,
        workers=workers,
        engine=engine,
        ray_address=ray_address,
        overwrite=overwrite,
        quiet=quiet,
    )
    run_curate([str(p) for p in inputs], out, options)
