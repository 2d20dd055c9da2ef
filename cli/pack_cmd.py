"""`caption-debias pack`: parse options, call the library."""

from __future__ import annotations

from typing import Optional

import typer


def pack(
    prepared: str = typer.Argument(..., help="Prepared (or curated) folder to pack (a local path or an fsspec URL)."),
    image_root: Optional[str] = typer.Option(
        None,
        "--image-root",
        help="Folder the rows' `image` paths are relative to (files or img2dataset tars); default: the one the input was prepared with.",
    ),
    out: str = typer.Option(
        ..., "--out", "-o", help="Output folder: NNNNN.tar, sizes.json, removed.jsonl, manifest.json."
    ),
    image_size: int = typer.Option(
        256,
        "--image-size",
        min=1,
        help="Target size for img2dataset's resizer (keep it >= the model's input, 224 for B/16).",
    ),
    resize_mode: str = typer.Option(
        "keep_ratio",
        "--resize-mode",
        help="img2dataset resize mode: keep_ratio (shorter side to --image-size), center_crop, border, keep_ratio_largest, no.",
    ),
    encode_quality: int = typer.Option(95, "--encode-quality", help="JPEG quality of the re-encoded images (0-100)."),
    samples_per_shard: int = typer.Option(
        10_000, "--samples-per-shard", min=1, help="Prepared rows per tar (a row whose image fails leaves a gap)."
    ),
    split: Optional[str] = typer.Option(None, "--split", help="Pack only rows of this split."),
    workers: int = typer.Option(
        1,
        "--workers",
        "-j",
        min=1,
        help="Worker processes, one tar each at a time (the tars are identical for any value).",
    ),
    engine: str = typer.Option(
        "local", "--engine", help="Where tars are made: local (process pool) or ray (same bytes)."
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray-address",
        help="Ray cluster to join with --engine ray (default: $RAY_ADDRESS, else a local runtime).",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete an earlier run in --out and start over (default: resume it)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no summary."),
) -> None:
    """Pack a prepared folder into webdataset tars (resized JPEG, caption, token ids) for train and open_clip_train."""
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack as run_pack

    options = PackOptions(
        image_root=str(image_root) if image_root else "",
        image_size=image_size,
        resize_mode=resize_mode,
        encode_quality=encode_quality,
        samples_per_shard=samples_per_shard,
        split=split,
        workers=workers,
        engine=engine,
        ray_address=ray_address,
        overwrite=overwrite,
        quiet=quiet,
    )
    run_pack(prepared, out, options)
