"""`caption_debias.prepare(...)`: the Python form of `caption-debias prepare`, and its one front door (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from caption_debias.api import Result, as_list, options_from, quiet_logs, stage_result
from caption_debias.dataset import REJECTS

if TYPE_CHECKING:
    from caption_debias.prepare.options import PrepareOptions


def prepare(
    inputs: str | Path | Iterable[str | Path],
    out: str | Path,
    *,
    options: PrepareOptions | None = None,
    **kwargs: Any,
) -> Result:
    """Prepare `inputs` into the folder `out`; the options are prepare's flags (PrepareOptions), as
    keyword arguments (`quiet` defaults to True) or as one PrepareOptions in `options`.

    Returns counts (read, written, rejected, ...) and paths (manifest, rejects, shards).
    Raises IncompleteInput after writing everything when an input was cut off.
    """
    from caption_debias.prepare.options import PrepareOptions

    opts = options_from(PrepareOptions, kwargs, "prepare", options).validate()
    from caption_debias.prepare.run import prepare as run

    with quiet_logs(opts.quiet):
        manifest = run(as_list(inputs), out, opts)
    return stage_result("prepare", out, manifest, {"rejects": REJECTS})
