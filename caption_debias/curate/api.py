"""`caption_debias.curate(...)`: the Python form of `caption-debias curate`, and its one front door (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from caption_debias.api import Result, as_list, options_from, quiet_logs, stage_result

if TYPE_CHECKING:
    from caption_debias.curate.options import CurateOptions


def curate(
    inputs: str | Path | Iterable[str | Path],
    out: str | Path,
    *,
    options: CurateOptions | None = None,
    **kwargs: Any,
) -> Result:
    """Curate prepared (or curated) folders into `out`; the options are curate's flags (CurateOptions),
    as keyword arguments (`quiet` defaults to True) or as one CurateOptions in `options`.

    Returns counts (read, written, removed, removed_by_reason) and paths (manifest, removed, shards).
    """
    from caption_debias.curate.options import CurateOptions

    opts = options_from(CurateOptions, kwargs, "curate", options)
    from caption_debias.curate.run import REMOVED
    from caption_debias.curate.run import curate as run

    with quiet_logs(opts.quiet):  # --score-model loads a model
        manifest = run(as_list(inputs), out, opts)  # checks the options once the inputs' image root is known
    return stage_result("curate", out, manifest, {"removed": REMOVED})
