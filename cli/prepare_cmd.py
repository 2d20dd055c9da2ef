"""`caption-debias prepare`: every dump format to tokenized Parquet shards (see docs/formats.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

FORMATS = (
    "auto",
    "sharegpt4v",
    "dci",
    "docci",
    "urban1k",
    "coco",
    "table",
    "img2dataset",
    "dreamlip",
    "recap-datacomp",
    "pixelprose",
)


def prepare(
    inputs: List[str] = typer.Argument(
        ...,
        help="Input files or folders (one dataset dump each; local paths or fsspec URLs such as s3://).",
        show_default=False,
    ),
    output: str = typer.Option(
        ...,
        "--output",
        "-o",
        help="Output folder for shards, manifest.json and rejects.jsonl (a local path or an fsspec URL).",
    ),
    format: str = typer.Option(
        "auto", "--format", "-f", help=f"Input format: {', '.join(FORMATS)} (auto: from path and first bytes)."
    ),
    image_root: Optional[Path] = typer.Option(
        None, "--image-root", help="Folder the image paths are relative to (default: the dataset's own root)."
    ),
    image_column: str = typer.Option(
        "image", "--image-column", help="Table/img2dataset column holding the image path or URL."
    ),
    caption_column: str = typer.Option(
        "caption",
        "--caption-column",
        help="Table/img2dataset column holding the caption; dreamlip: comma-separated columns, one record each (default longSV_captions); recap-datacomp: re_caption (default) or org_caption; pixelprose: vlm_caption.",
    ),
    key_column: str = typer.Option(
        "key", "--key-column", help="Table column holding a record id (keys are derived when absent)."
    ),
    split: Optional[str] = typer.Option(None, "--split", help="Split name for records whose input names none."),
    shard_rows: int = typer.Option(
        20_000, "--shard-rows", min=1, help="Records per shard (shard boundaries depend only on this)."
    ),
    workers: int = typer.Option(
        1, "--workers", "-j", min=1, help="Worker processes for the text steps (output is identical for any value)."
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Delete an earlier run in --output and start over (default: resume it)."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no summary."),
    limit: Optional[int] = typer.Option(
        None, "--limit", help="Only the first N records (to try a large dump in seconds); the manifest says so."
    ),
    log_interval: float = typer.Option(
        30.0, "--log-interval", help="Without a terminal: one plain progress line every this many seconds."
    ),
    segmenter: str = typer.Option("fast", "--segmenter", help="Sentence splitter: fast, pysbd or spacy."),
    summary: str = typer.Option("detect", "--summary", help="Summary-sentence rule: detect, first or none."),
    dci_caption: str = typer.Option(
        "short+extra",
        "--dci-caption",
        help="DCI caption: short+extra (joined by a newline), extra (Long-DCI), short+extra+masks.",
    ),
    engine: str = typer.Option(
        "local",
        "--engine",
        help="Where the text steps run: local (process pool) or ray (Ray Data tasks; same output). See docs/scale.md.",
    ),
    ray_address: Optional[str] = typer.Option(
        None,
        "--ray-address",
        help="Ray cluster to join with --engine ray (default: $RAY_ADDRESS, else a local Ray runtime with --workers CPUs).",
    ),
) -> None:
    """Turn image-caption dumps into tokenized Parquet shards with a manifest and a rejects list."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare as run_prepare

    options = PrepareOptions(
        format=format,
        image_root=str(image_root) if image_root else None,
        image_column=image_column,
        caption_column=caption_column,
        key_column=key_column,
        split=split,
        shard_rows=shard_rows,
        workers=workers,
        overwrite=overwrite,
        quiet=quiet,
        segmenter=segmenter,
        summary=summary,
        dci_caption=dci_caption,
        engine=engine,
        ray_address=ray_address,
        limit=limit,
        log_interval=log_interval,
    )
    run_prepare([str(p) for p in inputs], output, options)
