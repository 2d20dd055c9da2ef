"""`urls` and `export-captions`: hand prepared captions to img2dataset and to other trainers."""

from __future__ import annotations

import json

import typer

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.export.options import ExportCaptionsOptions, UrlsOptions

_PREPARED = argument("prepared", str, "Prepared folder (output of `caption-debias prepare`).")


def _urls(options: UrlsOptions, prepared: str, out: str) -> None:
    """Write an img2dataset-ready URL list from prepared shards and print the img2dataset command."""
    from caption_debias.export.urls import run_urls

    result = run_urls(prepared, out, options)
    if options.quiet:
        return
    skipped = result["skipped_not_url"]
    typer.echo(
        f"wrote {result['rows']} URLs to {result['path']}"
        + (f" ({skipped} rows with file paths, not URLs, left out)" if skipped else "")
    )
    typer.echo("download the images with:")
    typer.echo(result["command"])
    typer.echo(f"then train on them: caption-debias train {prepared} --image-root {result['images']} --out RUN ...")


def _export_captions(options: ExportCaptionsOptions, prepared: str, out: str) -> None:
    """Export captions, summary-stripped or DeBias-augmented, in layouts other trainers read."""
    from caption_debias.export.captions import run_export_captions

    result = run_export_captions(prepared, out, options)
    if not options.quiet:
        typer.echo(json.dumps(result))


urls = Command(
    UrlsOptions,
    _urls,
    args=(_PREPARED,),
    out=out_param("URL list to write, LIST.parquet (columns caption_key, url, caption)."),
    renamed={"--to": "--out"},
)
export_captions = Command(
    ExportCaptionsOptions,
    _export_captions,
    args=(_PREPARED,),
    out=out_param("File to write (.csv/.tsv, .jsonl or .parquet)."),
    renamed={"--to": "--out"},
)
