"""`caption-debias pack`: parse options, call the library."""

from __future__ import annotations

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.pack.options import PackOptions


def _pack(options: PackOptions, prepared: str, out: str) -> None:
    """Pack a prepared folder into webdataset tars (resized JPEG, caption, token ids) for train and open_clip_train."""
    from caption_debias.pack.api import pack

    pack(prepared, out, options=options)


pack = Command(
    PackOptions,
    _pack,
    args=(argument("prepared", str, "Prepared (or curated) folder to pack (a local path or an fsspec URL)."),),
    out=out_param("Output folder: NNNNN.tar, sizes.json, removed.jsonl, manifest.json."),
)
