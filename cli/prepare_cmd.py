"""`caption-debias prepare`: every dump format to tokenized Parquet shards (see docs/formats.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.prepare.options import PrepareOptions


def prepare(
    ctx: typer.Context,
    inputs: List[str] = typer.Argument(
        ...,
        help="Input files or folders (one dataset dump each; local paths or fsspec URLs such as s3://).",
        show_default=False,
    ),
    out: str = out_option("Output folder for shards, manifest.json and rejects.jsonl (a local path or an fsspec URL)."),
    format: str = from_field(PrepareOptions, "format"),
    image_root: Optional[str] = from_field(PrepareOptions, "image_root"),
    image_column: str = from_field(PrepareOptions, "image_column"),
    caption_column: str = from_field(PrepareOptions, "caption_column"),
    key_column: str = from_field(PrepareOptions, "key_column"),
    split: Optional[str] = from_field(PrepareOptions, "split"),
    shard_rows: int = from_field(PrepareOptions, "shard_rows"),
    workers: int = from_field(PrepareOptions, "workers"),
    overwrite: bool = from_field(PrepareOptions, "overwrite"),
    quiet: bool = from_field(PrepareOptions, "quiet"),
    limit: Optional[int] = from_field(PrepareOptions, "limit"),
    log_interval: float = from_field(PrepareOptions, "log_interval"),
    segmenter: str = from_field(PrepareOptions, "segmenter"),
    summary: str = from_field(PrepareOptions, "summary"),
    dci_caption: str = from_field(PrepareOptions, "dci_caption"),
    engine: str = from_field(PrepareOptions, "engine"),
    ray_address: Optional[str] = from_field(PrepareOptions, "ray_address"),
    config: Optional[Path] = config_option(),
) -> None:
    """Turn image-caption dumps into tokenized Parquet shards with a manifest and a rejects list."""
    from caption_debias.prepare.api import prepare as run_prepare

    run_prepare(inputs, out, options=options_from_params(PrepareOptions, ctx))
