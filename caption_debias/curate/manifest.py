"""OUT/manifest.json of a curated folder: prepare's contract plus removals, lineage and thresholds."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

from caption_debias import __version__
from caption_debias.curate.inputs import Inputs
from caption_debias.curate.options import REASONS, CurateOptions
from caption_debias.schema import SCHEMA_VERSION


def funnel(read: int, reasons: Counter) -> list[dict[str, Any]]:
    """read -> each reason in order (rows removed, rows left) -> written."""
    steps = [{"step": "read", "rows": read}]
    left = read
    for r in REASONS:
        left -= reasons.get(r, 0)
        steps.append({"step": r, "removed": reasons.get(r, 0), "left": left})
    steps.append({"step": "written", "rows": left})
    return steps


def build(
    *,
    inputs: Inputs,
    per_folder: dict[str, Counter],
    shards: list[dict[str, Any]],
    reasons: Counter,
    options: CurateOptions,
    coverage: dict[str, Any] | None,
    eval_sets: list[dict[str, Any]],
    elapsed_s: float,
    removed_before: int = 0,
) -> dict[str, Any]:
    """`removed_before`: rows removed ahead of the input folders (by --score-model's scoring)."""
    read = sum(c["read"] for c in per_folder.values())
    written = sum(c["written"] for c in per_folder.values())
    removed = sum(reasons.values())
    if not read == written + removed == inputs.rows + removed_before:  # counts reconcile (not an assert: python -O)
        raise RuntimeError(f"curate counts do not reconcile: read {read}, written {written}, removed {removed}")
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
        "curation": {
            "thresholds": options.thresholds(),
            "funnel": funnel(read, reasons),
            "decontaminate": eval_sets,
            "image_coverage": coverage,
        },
        "tokenizer": first.get("tokenizer", {}),
        "segmenter": first.get("segmenter", {}),
        "summary": first.get("summary", {}),
        **({"scoring": first["scoring"]} if first.get("scoring") else {}),  # the model behind the score columns
        "toolkit_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 3),
    }
