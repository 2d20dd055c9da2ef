"""`caption-debias prepare`: every dump format to tokenized Parquet shards (see docs/formats.md)."""

from __future__ import annotations

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.prepare.options import PrepareOptions


def _prepare(options: PrepareOptions, inputs: list[str], out: str) -> None:
    """Turn image-caption dumps into tokenized Parquet shards with a manifest and a rejects list."""
    from caption_debias.prepare.api import prepare

    prepare(inputs, out, options=options)


prepare = Command(
    PrepareOptions,
    _prepare,
    args=(
        argument(
            "inputs",
            list[str],
            "Input files or folders (one dataset dump each; local paths or fsspec URLs such as s3://).",
            show_default=False,
        ),
    ),
    out=out_param("Output folder for shards, manifest.json and rejects.jsonl (a local path or an fsspec URL)."),
    renamed={"--output": "--out"},
)
