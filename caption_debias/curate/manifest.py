"""OUT/manifest.json of a curated folder: prepare's contract plus removals, lineage and thresholds."""

from __future__ import annotations

from collections import Counter
from typing import Any

from caption_debias.curate.options import REASONS, CurateOptions
from caption_debias.input_folders import Tally, carried
from caption_debias.runner import stamp


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
    tally: Tally,
    options: CurateOptions,
    coverage: dict[str, Any] | None,
    eval_sets: list[dict[str, Any]],
    elapsed_s: float,
) -> dict[str, Any]:
    """`tally`: the write step's sidecars, with any rows removed ahead of the input folders (by --score-model)."""
    tally.reconcile("curate")
    first = tally.inputs.manifests[0] if tally.inputs.manifests else {}
    return {
        **tally.manifest_head(REASONS, options.to_dict()),
        "curation": {
            "thresholds": options.thresholds(),
            "funnel": funnel(tally.read, tally.reasons),
            "decontaminate": eval_sets,
            "image_coverage": coverage,
        },
        **carried(tally.inputs),
        **({"scoring": first["scoring"]} if first.get("scoring") else {}),  # the model behind the score columns
        **stamp(elapsed_s),
    }
