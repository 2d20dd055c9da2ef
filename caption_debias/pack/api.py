"""`caption_debias.pack(...)`: the Python form of `caption-debias pack`, and its one front door (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption_debias.api import Result, options_from, stage_result

if TYPE_CHECKING:
    from caption_debias.pack.options import PackOptions


def pack(prepared: str | Path, out: str | Path, *, options: PackOptions | None = None, **kwargs: Any) -> Result:
    """Pack a prepared (or curated) folder into webdataset tars in `out`; the options are pack's flags
    (PackOptions), as keyword arguments (`quiet` defaults to True) or as one PackOptions in `options`.

    Returns counts (read, written, removed) and paths (manifest, removed, sizes, tars);
    `data["train_data"]` is the brace pattern for open_clip_train's --train-data.
    """
    from caption_debias.pack.options import PackOptions

    opts = options_from(PackOptions, kwargs, "pack", options)
    from caption_debias.pack.run import pack as run
    from caption_debias.pack.state import REMOVED, SIZES

    manifest = run(str(prepared), out, opts)  # checks the options once the input's image root is known
    return stage_result("pack", out, manifest, {"removed": REMOVED, "sizes": SIZES})
