"""`caption-debias score`: model signals per row (docs/curation.md, "Model signals")."""

from __future__ import annotations

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.score.options import ScoreOptions


def _score(options: ScoreOptions, inputs: list[str], out: str) -> None:
    """Score every row with an open_clip model: image-caption alignment, per-sentence scores and grounding."""
    from caption_debias.score.api import score

    score(inputs, out, options=options)


score = Command(
    ScoreOptions,
    _score,
    args=(
        argument(
            "inputs", list[str], "Prepared (or curated) folders, scored in order as one input.", show_default=False
        ),
    ),
    out=out_param(
        "Output folder: shards with the score columns, manifest.json (with the model's identity) and removed.jsonl."
    ),
)
