"""`caption_debias.pack(...)`: the Python form of `caption-debias pack` (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from caption_debias.api import Result, options_from, stage_result


def pack(prepared: str | Path, out: str | Path, *, quiet: bool = True, **options: Any) -> Result:
    """Pack a prepared (or curated) folder into webdataset tars in `out`; the options are pack's flags (PackOptions).

    Returns counts (read, written, removed) and paths (manifest, removed, sizes, tars);
    `data["train_data"]` is the brace pattern for open_clip_train's --train-data.
    """
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack as run
    from caption_debias.pack.state import REMOVED, SIZES

    opts = options_from(PackOptions, options, "pack", quiet=quiet)
    manifest = run(str(prepared), out, opts)
    return stage_result("pack", out, manifest, {"removed": REMOVED, "sizes": SIZES})
