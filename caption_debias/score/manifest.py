"""OUT/manifest.json of a scored folder: prepare's contract plus removals, lineage and the model's identity."""

from __future__ import annotations

from collections import Counter
from typing import Any

from caption_debias.input_folders import Tally, carried
from caption_debias.runner import manifest_stamp
from caption_debias.score.options import REASONS, ScoreOptions
from caption_debias.score.signals import MIN_OTHERS

GROUNDING_RULE = (
    "(t.v - mean(t.R)) / (std(t.R) + 1e-6): t a sentence's embedding, v its own image's, R the reference "
    "images less any with the row's own image path (population std); null with fewer than "
    f"{MIN_OTHERS} of them"
)


def build(
    *,
    tally: Tally,
    options: ScoreOptions,
    model: dict[str, Any],
    reference: dict[str, Any],
    context: Counter,
    elapsed_s: float,
) -> dict[str, Any]:
    tally.reconcile("score")
    return {
        **tally.manifest_head(REASONS, options.to_dict()),
        "scoring": {
            "model": model,
            "device": options.device,
            "precision": options.precision,
            "batch_size": options.batch_size,
            "captions_over_context": context["captions_over_context"],
            "sentences_over_context": context["sentences_over_context"],
            "sentences": context["sentences"],
            "reference": reference,
            "grounding_rule": GROUNDING_RULE,
            "embeddings": options.keep_embeddings,
        },
        **carried(tally.inputs),
        **manifest_stamp(elapsed_s),
    }
