"""`caption-debias curate`: images checked, duplicates and eval leaks removed, degenerate captions flagged (docs/curation.md)."""

from __future__ import annotations

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.curate.options import CurateOptions


def _curate(options: CurateOptions, inputs: list[str], out: str) -> None:
    """Curate prepared folders into a training set: every removed row is listed with its reason."""
    from caption_debias.curate.api import curate

    curate(inputs, out, options=options)


curate = Command(
    CurateOptions,
    _curate,
    args=(
        argument(
            "inputs",
            list[str],
            "Prepared (or curated) folders, in order: of duplicates, the earliest row is kept.",
            show_default=False,
        ),
    ),
    out=out_param("Output folder: shards, manifest.json and removed.jsonl (a local path or an fsspec URL)."),
)
