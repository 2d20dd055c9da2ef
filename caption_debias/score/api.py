"""`caption_debias.score(...)`: the Python form of `caption-debias score`, and its one front door (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from caption_debias.api import Result, as_list, options_from, quiet_logs, stage_result

if TYPE_CHECKING:
    from caption_debias.score.options import ScoreOptions


def score(
    inputs: str | Path | Iterable[str | Path],
    out: str | Path,
    *,
    options: ScoreOptions | None = None,
    **kwargs: Any,
) -> Result:
    """Score prepared (or curated) folders with an open_clip model into `out`; the options are score's
    flags (ScoreOptions: model, pretrained, batch_size, keep_embeddings, ...), as keyword arguments
    (`quiet` defaults to True) or as one ScoreOptions in `options`.

    Returns counts (read, written, removed) and paths (manifest, removed, shards); `data` is the
    manifest (with the model's identity and the reference sample).
    """
    from caption_debias.score.options import ScoreOptions

    opts = options_from(ScoreOptions, kwargs, "score", options).validate()  # before torch loads
    from caption_debias.score.run import REMOVED, score_folder

    with quiet_logs(opts.quiet):
        manifest = score_folder(as_list(inputs), out, opts)
    return stage_result("score", out, manifest, {"removed": REMOVED})
