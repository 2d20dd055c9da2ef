"""Summary detection: which sentences of a long caption summarise the whole picture.

`summary_scores` is position-free: a sentence's score depends only on its own words and
on the set of the other sentences (shuffling the sentences permutes the scores and
nothing else). `summary_mask` turns scores into flags for the opening and the closing
summary and may use position.
"""

from __future__ import annotations

import math
import re

SUMMARY_MODES = ("detect", "first", "none")

_WORD = re.compile(r"[a-z]+")
_PRONOUN_OPEN = re.compile(r"^(it|its|they|their|them|he|she|his|her|this|these|those|there|both|each|one|another|also)\b")
_SPATIAL_OPEN = re.compile(
    r"^(in|on|at|to|behind|above|below|beneath|under|underneath|near|next|beside|along|across|"
    r"around|inside|outside|over|towards?|further|farther|further|left|right)\b"
)
_WHOLE_PICTURE = re.compile(
    r"\b(image|photo|photograph|picture|shot|view|scene|depicts?|captures?|shows?|features?|close-up|"
    r"closeup|eye-level|high-angle|low-angle|aerial|overhead|outdoor|indoor|illustration|painting|"
    r"drawing|screenshot|selfie|portrait|landscape)\b"
)
_CLOSING = re.compile(
    r"^(overall|in summary|in conclusion|altogether|all in all|in essence|the overall|"
    r"the (image|scene|photo|photograph|picture) (as a whole|overall|conveys|evokes|exudes|captures|creates|"
    r"gives|has|is filled with)|this (image|scene|photo|photograph|picture) (conveys|evokes|exudes|captures|creates))\b"
)
_STOP = frozenset(
    "a an the and or of in on at to with by for from is are was were be been being it its this that these those "
    "there their they them he she his her as into onto over under near which who while has have had can "
    "also some several many few two three one other another each both very".split()
)


def _content(sentence: str) -> list[str]:
    return [w for w in _WORD.findall(sentence.lower()) if w not in _STOP and len(w) > 2]


def _features(sentences: list[str]) -> list[dict[str, float]]:
    words = [_content(s) for s in sentences]
    sets = [set(w) for w in words]
    feats = []
    for i, s in enumerate(sentences):
        low = s.strip().lower()
        others = [sets[j] for j in range(len(sentences)) if j != i]
        # how many other sentences mention one of this sentence's content words:
        # the summary introduces the entities the details refer back to.
        refs = sum(1 for o in others if sets[i] & o) / max(1, len(others))
        first_words = _WORD.findall(low[:40])
        feats.append(
            {
                "refs": refs,
                "indef_open": 1.0 if first_words[:1] in (["a"], ["an"]) else 0.0,
                "pronoun_open": 1.0 if _PRONOUN_OPEN.match(low) else 0.0,
                "spatial_open": 1.0 if _SPATIAL_OPEN.match(low) else 0.0,
                "whole_picture": 1.0 if _WHOLE_PICTURE.search(low) else 0.0,
                "closing": 1.0 if _CLOSING.match(low) else 0.0,
                "log_len": math.log1p(len(words[i])),
            }
        )
    return feats


_WEIGHTS = {
    "refs": 2.0,
    "indef_open": 1.5,
    "pronoun_open": -2.0,
    "spatial_open": -1.5,
    "whole_picture": 1.0,
    "closing": -0.5,
    "log_len": 0.3,
}
_BIAS = -1.5


def summary_scores(sentences: list[str]) -> list[float]:
    """Score in [0, 1] per sentence for how much it summarises the caption (position-free)."""
    if not sentences:
        return []
    out = []
    for f in _features(sentences):
        z = _BIAS + sum(_WEIGHTS[k] * v for k, v in f.items())
        out.append(1.0 / (1.0 + math.exp(-z)))
    return out


def is_closing_summary(sentence: str) -> bool:
    """'Overall, ...', 'The overall atmosphere is ...', 'The image conveys ...'."""
    return _CLOSING.match(sentence.strip().lower()) is not None


def summary_mask(sentences: list[str], scores: list[float], mode: str = "detect") -> list[bool]:
    """Flags for the opening and closing summaries under `mode` (see SUMMARY_MODES)."""
    n = len(sentences)
    if mode == "none":
        return [False] * n
    if mode == "first":
        return [i == 0 for i in range(n)]
    if mode != "detect":
        from caption_debias.errors import UserError

        raise UserError(f"unknown summary mode {mode!r}: choose one of {', '.join(SUMMARY_MODES)}")
    mask = [False] * n
    if n == 0:
        return mask
    # Long captions open with a summary almost always; a first sentence is left unflagged
    # only when it reads as a detail (low score) and a later sentence scores clearly higher.
    mask[0] = not (scores[0] < 0.5 and max(scores) - scores[0] > 0.25)
    if n >= 3 and is_closing_summary(sentences[-1]):
        mask[-1] = True
    return mask


def describe(mode: str) -> dict:
    return {"mode": mode, "method": "heuristic-v1" if mode == "detect" else mode}
