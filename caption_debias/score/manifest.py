"""OUT/manifest.json of a scored folder: prepare's contract plus removals, lineage and the model's identity."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

from caption_debias import __version__
from caption_debias.schema import SCHEMA_VERSION
from caption_debias.score.inputs import Inputs
from caption_debias.score.options import REASONS, ScoreOptions
from caption_debias.score.signals import MIN_OTHERS

GROUNDING_RULE = (
    "(t.v - mean(t.R)) / (std(t.R) + 1e-6): t a sentence's embedding, v its own image's, R the reference "
    "images less any with the row's own image path (population std); null with fewer than "
    f"{MIN_OTHERS} of them"
)


def build(
    *,
    inputs: Inputs,
    per_folder: dict[str, Counter],
    shards: list[dict[str, Any]],
    reasons: Counter,
    options: ScoreOptions,
    model: dict[str, Any],
    reference: dict[str, Any],
    context: Counter,
    elapsed_s: float,
) -> dict[str, Any]:
    read = sum(c["read"] for c in per_folder.values())
    written = sum(c["written"] for c in per_folder.values())
    removed = sum(reasons.values())
    assert read == written + removed == inputs.rows, (read, written, removed, inputs.rows)  # counts reconcile
    first = inputs.manifests[0] if inputs.manifests else {}
    return {
        "schema_version": SCHEMA_VERSION,
        "complete": all(f["complete"] for f in inputs.folders),
        "counts": {
            "read": read,
            "written": written,
            "removed": removed,
            "removed_by_reason": {r: reasons.get(r, 0) for r in REASONS},
        },
        "inputs": [
            {
                **f,
                "format": f["kind"],
                "read": per_folder[f["path"]]["read"],
                "written": per_folder[f["path"]]["written"],
                "removed": per_folder[f["path"]]["removed"],
            }
            for f in inputs.folders
        ],
        "shards": shards,
        "options": {"inputs": [f["path"] for f in inputs.folders], **options.to_dict()},
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
        "tokenizer": first.get("tokenizer", {}),
        "segmenter": first.get("segmenter", {}),
        "summary": first.get("summary", {}),
        "toolkit_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 3),
    }
