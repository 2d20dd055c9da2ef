"""`caption-debias pack`: parse options, call the library."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.pack.options import PackOptions


def pack(
    ctx: typer.Context,
    prepared: str = typer.Argument(..., help="Prepared (or curated) folder to pack (a local path or an fsspec URL)."),
    image_root: Optional[str] = from_field(PackOptions, "image_root"),
    max_missing_images: float = from_field(PackOptions, "max_missing_images"),
    out: str = out_option("Output folder: NNNNN.tar, sizes.json, removed.jsonl, manifest.json."),
    image_size: int = from_field(PackOptions, "image_size"),
    resize_mode: str = from_field(PackOptions, "resize_mode"),
    encode_quality: int = from_field(PackOptions, "encode_quality"),
    samples_per_shard: int = from_field(PackOptions, "samples_per_shard"),
    split: Optional[str] = from_field(PackOptions, "split"),
    workers: int = from_field(PackOptions, "workers"),
    engine: str = from_field(PackOptions, "engine"),
    ray_address: Optional[str] = from_field(PackOptions, "ray_address"),
    overwrite: bool = from_field(PackOptions, "overwrite"),
    quiet: bool = from_field(PackOptions, "quiet"),
    log_interval: float = from_field(PackOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Pack a prepared folder into webdataset tars (resized JPEG, caption, token ids) for train and open_clip_train."""
    from caption_debias.pack.api import pack as run_pack

    run_pack(prepared, out, options=options_from_params(PackOptions, ctx))
