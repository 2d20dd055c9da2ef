"""`caption_debias.prepare(...)`: the Python form of `caption-debias prepare` (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from caption_debias.api import Result, as_list, options_from, stage_result
from caption_debias.dataset import REJECTS


def prepare(
    inputs: str | Path | Iterable[str | Path], out: str | Path, *, quiet: bool = True, **options: Any
) -> Result:
    """Prepare `inputs` into the folder `out`; the options are prepare's flags (PrepareOptions).

    Returns counts (read, written, rejected, ...) and paths (manifest, rejects, shards).
    Raises IncompleteInput after writing everything when an input was cut off.
    """
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare as run

    opts = options_from(PrepareOptions, options, "prepare", quiet=quiet)
    manifest = run(as_list(inputs), out, opts)
    return stage_result("prepare", out, manifest, {"rejects": REJECTS})
