"""`urls` and `export-captions`: hand prepared captions to img2dataset and to other trainers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, log_interval_option, out_option, quiet_option


def urls(
    prepared: str = typer.Argument(..., help="Prepared folder (output of `caption-debias prepare`)."),
    out: str = out_option("URL list to write, LIST.parquet (columns caption_key, url, caption)."),
    images: Optional[str] = typer.Option(
        None, "--images", help="Folder img2dataset should download into (for the printed command; default LIST_images)."
    ),
    image_size: int = typer.Option(256, "--image-size", help="--image_size for img2dataset (keep_ratio resize)."),
    processes: int = typer.Option(8, "--processes", help="--processes_count for img2dataset."),
    threads: int = typer.Option(64, "--threads", help="--thread_count for img2dataset."),
    strip: str = typer.Option(
        "none",
        "--strip",
        help="Caption img2dataset stores as KEY.txt: none (as prepared), summary or opening (sentences dropped as in export-captions).",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace LIST if it exists."),
    quiet: bool = quiet_option(),
    log_interval: float = log_interval_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Write an img2dataset-ready URL list from prepared shards and print the img2dataset command."""
    from caption_debias.export.urls import write_url_list
    from caption_debias.progress import Progress

    with Progress("urls", "rows", quiet=quiet, interval=log_interval):
        result = write_url_list(
            prepared,
            out,
            images=images,
            image_size=image_size,
            processes=processes,
            threads=threads,
            strip=strip,
            overwrite=overwrite,
        )
    if quiet:
        return
    typer.echo(
        f"wrote {result['rows']} URLs to {result['path']}"
        + (
            f" ({result['skipped_not_url']} rows with file paths, not URLs, left out)"
            if result["skipped_not_url"]
            else ""
        )
    )
    typer.echo("download the images with:")
    typer.echo(result["command"])
    typer.echo(f"then train on them: caption-debias train {prepared} --image-root {result['images']} --out RUN ...")


def export_captions(
    prepared: str = typer.Argument(..., help="Prepared folder (output of `caption-debias prepare`)."),
    out: str = out_option("File to write (.csv/.tsv, .jsonl or .parquet)."),
    fmt: Optional[str] = typer.Option(
        None,
        "--format",
        help="open_clip-csv (tab-separated filepath/title), jsonl or parquet; default from --out's suffix.",
    ),
    strip: str = typer.Option(
        "summary",
        "--strip",
        help="Sentences to drop: summary (flagged by prepare's --summary rule), opening (the first), none.",
    ),
    augment: str = typer.Option(
        "none",
        "--augment",
        help="none, or debias: K sub-sampled variants per image of the sentences left after --strip.",
    ),
    copies: int = typer.Option(1, "--copies", help="Variants per image with --augment debias (K)."),
    seed: int = typer.Option(
        0, "--seed", help="Seed of --augment debias; each row's draw depends only on (seed, key)."
    ),
    image_root: Optional[Path] = typer.Option(
        None, "--image-root", help="Prefix for image paths that are not URLs (open_clip reads filepath as given)."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace FILE if it exists."),
    quiet: bool = quiet_option(),
    log_interval: float = log_interval_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Export captions, summary-stripped or DeBias-augmented, in layouts other trainers read."""
    from caption_debias.export.captions import export_captions as run
    from caption_debias.progress import Progress

    with Progress("export-captions", "rows", quiet=quiet, interval=log_interval):
        result = run(
            prepared,
            out,
            fmt=fmt,
            strip=strip,
            augment=augment,
            copies=copies,
            seed=seed,
            image_root=image_root,
            overwrite=overwrite,
        )
    if not quiet:
        typer.echo(json.dumps(result))
