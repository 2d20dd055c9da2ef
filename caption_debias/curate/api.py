"""`caption_debias.curate(...)`: the Python form of `caption-debias curate` (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from caption_debias.api import Result, as_list, options_from, stage_result


def curate(inputs: str | Path | Iterable[str | Path], out: str | Path, *, quiet: bool = True, **options: Any) -> Result:
    """Curate prepared (or curated) folders into `out`; the options are curate's flags (CurateOptions).

    Returns counts (read, written, removed, removed_by_reason) and paths (manifest, removed, shards).
    """
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import REMOVED
    from caption_debias.curate.run import curate as run

    opts = options_from(CurateOptions, options, "curate", quiet=quiet)
    manifest = run(as_list(inputs), out, opts)
    return stage_result("curate", out, manifest, {"removed": REMOVED})
