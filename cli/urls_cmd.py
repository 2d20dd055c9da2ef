"""`urls` and `export-captions`: hand prepared captions to img2dataset and to other trainers.

Every option's default and help text come from its UrlsOptions / ExportCaptionsOptions field (export/options.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.export.options import ExportCaptionsOptions, UrlsOptions


def urls(
    ctx: typer.Context,
    prepared: str = typer.Argument(..., help="Prepared folder (output of `caption-debias prepare`)."),
    out: str = out_option("URL list to write, LIST.parquet (columns caption_key, url, caption)."),
    images: Optional[str] = from_field(UrlsOptions, "images"),
    image_size: int = from_field(UrlsOptions, "image_size"),
    processes: int = from_field(UrlsOptions, "processes"),
    threads: int = from_field(UrlsOptions, "threads"),
    strip: str = from_field(UrlsOptions, "strip"),
    overwrite: bool = from_field(UrlsOptions, "overwrite"),
    quiet: bool = from_field(UrlsOptions, "quiet"),
    log_interval: float = from_field(UrlsOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Write an img2dataset-ready URL list from prepared shards and print the img2dataset command."""
    from caption_debias.export.urls import run_urls

    result = run_urls(prepared, out, options_from_params(UrlsOptions, ctx))
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
    ctx: typer.Context,
    prepared: str = typer.Argument(..., help="Prepared folder (output of `caption-debias prepare`)."),
    out: str = out_option("File to write (.csv/.tsv, .jsonl or .parquet)."),
    format: Optional[str] = from_field(ExportCaptionsOptions, "format"),
    strip: str = from_field(ExportCaptionsOptions, "strip"),
    augment: str = from_field(ExportCaptionsOptions, "augment"),
    copies: int = from_field(ExportCaptionsOptions, "copies"),
    seed: int = from_field(ExportCaptionsOptions, "seed"),
    image_root: Optional[str] = from_field(ExportCaptionsOptions, "image_root"),
    overwrite: bool = from_field(ExportCaptionsOptions, "overwrite"),
    quiet: bool = from_field(ExportCaptionsOptions, "quiet"),
    log_interval: float = from_field(ExportCaptionsOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Export captions, summary-stripped or DeBias-augmented, in layouts other trainers read."""
    from caption_debias.export.captions import run_export_captions

    result = run_export_captions(prepared, out, options_from_params(ExportCaptionsOptions, ctx))
    if not quiet:
        typer.echo(json.dumps(result))
