"""Why a row was removed, in words: the signal that removed it and the rule it broke, from its
removed.jsonl detail and the thresholds its folder's manifest records (a card shows this, not JSON).

`describe(reason, detail, thresholds, image)`: one sentence per reason of curate's funnel (and
score's image reasons); a reason it does not know is shown with its detail as compact JSON.
"""

from __future__ import annotations

import json
from typing import Any, Callable

Detail = dict[str, Any]


def _num(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:.{digits}f}".rstrip("0").rstrip(".") if v == v else "NaN"


def _image_match(d: Detail, t: Detail) -> str:
    by, match = d.get("by"), d.get("match")
    if by == "image phash":
        limit = t.get("phash_hamming_max")
        bits = d.get("hamming")
        at_most = f", at most {limit}" if limit is not None else ""
        return f"the same picture as {match}: perceptual hashes {_num(bits)} of 64 bits apart{at_most}"
    if by == "image sha256":
        return f"the same bytes as {match} (sha256)"
    return f"the same image as {match} ({by})"


def _eval_overlap(d: Detail, t: Detail) -> str:
    by = str(d.get("by") or "")
    if by.startswith("image"):
        return "an evaluation image: " + _image_match(d, t)
    sim = d.get("similarity")
    if sim == 1.0:
        return f"the caption of evaluation item {d.get('match')} ({by})"
    return f"near the caption of evaluation item {d.get('match')}: Jaccard about {_num(sim, 2)} ({by})"


def _repetitive(d: Detail, t: Detail) -> str:
    rep = t.get("repetition") or {}
    parts = []
    if (d.get("caption_repetition") or 0) > rep.get("caption_repetition_max", 1):
        parts.append(
            f"{_num(d['caption_repetition'] * 100, 0)}% of its tokens in repeated 4-grams "
            f"(--repetition-max {_num(rep['caption_repetition_max'])})"
        )
    if (d.get("caption_repeated_sentences") or 0) > rep.get("repeated_sentences_max", 1 << 30):
        parts.append(f"{d['caption_repeated_sentences']} sentences repeat an earlier one")
    if d.get("caption_tail_loop"):
        parts.append(f"it ends in a loop of {d['caption_tail_loop']} tokens")
    return "repetitive: " + ("; ".join(parts) or f"caption_repetition {_num(d.get('caption_repetition'))}")


def _low_alignment(d: Detail, t: Detail) -> str:
    score = d.get("clip_score")
    parts = []
    if d.get("min_clip_score") is not None and not (score is not None and score >= d["min_clip_score"]):
        parts.append(f"below --min-clip-score {_num(d['min_clip_score'])}")
    if d.get("keep_top_alignment") is not None:
        cut = d.get("cutoff")
        if cut is None or score is None or score < cut or not parts:
            ranked = f": the {_num(d.get('kept_by_rank'))} best kept, cut-off {_num(cut, 4)}" if cut is not None else ""
            parts.append(f"outside the top {_num(d['keep_top_alignment'])}% of clip_score{ranked}")
    shown = "no clip_score" if score is None else f"clip_score {_num(score, 4)}"
    return f"{shown}, " + " and ".join(parts or ["low image-caption alignment"])


def _ungrounded(d: Detail, t: Detail) -> str:
    return (
        f"every detail sentence grounds below --drop-ungrounded {_num(d.get('threshold'))} "
        f"(the best: {_num(d.get('detail_grounding_max'))})"
    )


def _near_caption(d: Detail, t: Detail) -> str:
    limit = t.get("near_duplicate_jaccard")
    at_least = f", at least {_num(limit)}" if limit is not None else ""
    return f"caption near {d.get('match')}: estimated Jaccard {_num(d.get('similarity'), 2)} of word 3-grams{at_least}"


def _semantic(d: Detail, t: Detail) -> str:
    limit = (
        (t.get("semantic_duplicate") or {}).get("cosine_min") if isinstance(t.get("semantic_duplicate"), dict) else None
    )
    at_least = f", at least {_num(limit)}" if limit is not None else ""
    return f"image embedding near {d.get('match')}: cosine {_num(d.get('similarity'), 4)} ({d.get('by')}{at_least})"


def _too_small(d: Detail, t: Detail) -> str:
    side = t.get("min_image_side")
    rule = f": shorter side below --min-image-side {side}" if side is not None else ""
    return f"{_num(d.get('width'))} x {_num(d.get('height'))} px{rule}"


def _excluded(d: Detail, t: Detail) -> str:
    return f"{d.get('by', 'excluded by the user')} {d.get('file', '')}".strip()


RULES: dict[str, Callable[[Detail, Detail], str]] = {
    "image_unreadable": lambda d, t: f"the image does not decode: {d.get('error') or 'unreadable'}",
    "image_too_small": _too_small,
    "eval_overlap": _eval_overlap,
    "repetitive_caption": _repetitive,
    "truncated_caption": lambda d, t: "the caption stops mid-sentence",
    "invalid_signal": lambda d, t: f"{d.get('column')} cannot be used: {d.get('problem')}",
    "low_alignment": _low_alignment,
    "ungrounded_caption": _ungrounded,
    "duplicate_image": _image_match,
    "duplicate_caption": lambda d, t: f"the same caption as {d.get('match')} (case and spacing aside)",
    "near_duplicate_caption": _near_caption,
    "semantic_duplicate": _semantic,
    "excluded_by_user": _excluded,
}


def describe(reason: str, detail: Detail | None, thresholds: Detail | None, image: str | None = None) -> str:
    """The signal that removed a row and the rule it broke, as one sentence."""
    d, t = detail if isinstance(detail, dict) else {}, thresholds if isinstance(thresholds, dict) else {}
    if reason == "image_missing":
        return f"no file {image!r} under the image root" if image else "no image file"
    rule = RULES.get(reason)
    if rule is not None:
        try:
            return rule(d, t)
        except (TypeError, KeyError, ValueError):  # a detail of another shape (an older curate): shown as is
            pass
    return f"{reason}: {json.dumps(d, ensure_ascii=False, sort_keys=True)[:300]}" if d else str(reason)
