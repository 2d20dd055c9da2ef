"""OUT/manifest.json of a curated folder: prepare's contract plus removals, lineage and thresholds."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from caption_debias.curate.options import REASONS, CurateOptions
from caption_debias.input_folders import Tally, carried
from caption_debias.runner import manifest_stamp

if TYPE_CHECKING:
    from caption_debias.curate.keys import KeyList


def funnel(read: int, reasons: Counter) -> list[dict[str, Any]]:
    """read -> each reason in order (rows removed, rows left) -> written."""
    steps = [{"step": "read", "rows": read}]
    left = read
    for r in REASONS:
        left -= reasons.get(r, 0)
        steps.append({"step": r, "removed": reasons.get(r, 0), "left": left})
    steps.append({"step": "written", "rows": left})
    return steps


def sentence_masks(parts: list[dict[str, int] | None], options: CurateOptions, reasons: Counter) -> dict | None:
    """What the written rows' sentence_keep masks drop, summed over the shards; None when no row has a mask."""
    found = [p for p in parts if p]
    if not found and options.drop_ungrounded is None:
        return None
    totals = {k: sum(p[k] for p in found) for k in ("rows", "rows_masked", "sentences", "sentences_masked")}
    return {
        "threshold": options.drop_ungrounded,  # null: the input's mask, carried
        **totals,
        "rows_removed": reasons.get("ungrounded_caption", 0),
    }


def build(
    *,
    tally: Tally,
    options: CurateOptions,
    coverage: dict[str, Any] | None,
    eval_sets: list[dict[str, Any]],
    elapsed_s: float,
    masks: Sequence[dict[str, int] | None] = (),
    alignment: dict[str, Any] | None = None,
    key_lists: dict[str, KeyList] | None = None,
) -> dict[str, Any]:
    """`tally`: the write step's sidecars, with any rows removed ahead of the input folders (by --score-model);
    `key_lists`: the run's one reading of its key files (the digests recorded are of the bytes that decided)."""
    tally.reconcile("curate")
    masked = sentence_masks(list(masks), options, tally.reasons)
    first: Mapping[str, object] = tally.inputs.manifests[0] if tally.inputs.manifests else {}
    return {
        **tally.manifest_head(REASONS, options.to_dict()),
        "curation": {
            "thresholds": options.thresholds(key_lists),
            "funnel": funnel(tally.read, tally.reasons),
            "decontaminate": eval_sets,
            "image_coverage": coverage,
            **({"sentence_keep": masked} if masked is not None else {}),
            **({"low_alignment": alignment} if alignment else {}),  # where --keep-top-alignment cut
        },
        **carried(tally.inputs),
        **({"scoring": first["scoring"]} if first.get("scoring") else {}),  # the model behind the score columns
        **manifest_stamp(elapsed_s),
    }
