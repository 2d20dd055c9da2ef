"""What every segmenter shares: the interface, exact-span helpers, and the fast paths' result type."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from typing import Callable

# Longer texts are cut into pieces of at most this many characters before any segmenter sees
# them: pysbd's abbreviation replacer (and the scans around it) cost the square of what they
# are handed, so a piece bound keeps a caption's time linear in its length. Real long captions
# stay far below it (ImageInWords, DOCCI: under 2,500 characters).
PIECE_CHARS = 10_000
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


class Segmenter(ABC):
    """Sentences of a text as character spans: `text[start:end]` is the stripped, non-empty
    sentence; spans are in order, do not overlap, and cover every non-space character."""

    name: str

    @abstractmethod
    def spans(self, text: str) -> list[tuple[int, int]]: ...

    @abstractmethod
    def describe(self) -> dict:
        """What runs, as written into the manifest."""


def tight(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Shrink [start, end) to exclude surrounding whitespace; None when nothing is left."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def align_sentences(text: str, sentences: list[str]) -> list[tuple[int, int]]:
    """Character spans of `sentences` found in order in `text`.

    pysbd and spaCy return sentence strings; we locate each one after the previous
    one. When a segmenter altered a sentence (it should not with clean=False), the
    text up to the next sentence that can be found is kept as one span, so no
    character of the caption is ever lost.
    """
    spans: list[tuple[int, int]] = []
    pos = 0
    pending_start: int | None = None
    for sent in sentences:
        s = sent.strip()
        if not s:
            continue
        i = text.find(s, pos)
        if i < 0:
            if pending_start is None:
                pending_start = pos
            continue
        if pending_start is not None:
            t = tight(text, pending_start, i)
            if t:
                spans.append(t)
            pending_start = None
        spans.append((i, i + len(s)))
        pos = i + len(s)
    if pending_start is not None or pos < len(text):
        t = tight(text, pending_start if pending_start is not None else pos, len(text))
        if t:
            spans.append(t)
    return spans


def pieces(text: str, limit: int = PIECE_CHARS) -> list[tuple[int, int]]:
    """[start, end) pieces of at most `limit` characters that tile `text`, each cut where a
    sentence surely ends if one can be found in the second half of the piece: after a line
    break, else after a mark followed by a capital, else at a space, else anywhere."""
    out, start, n = [], 0, len(text)
    while n - start > limit:
        lo, hi = start + limit // 2, start + limit
        cut = text.rfind("\n", lo, hi) + 1
        if not cut:
            ends = [m.end() for m in _SENTENCE_END.finditer(text, lo, hi)]
            cut = ends[-1] if ends else 0
        if not cut:
            space = max(text.rfind(" ", lo, hi), text.rfind("\t", lo, hi))
            cut = space + 1 if space >= 0 else hi
        out.append((start, cut))
        start = cut
    out.append((start, n))
    return out


def spans_in_pieces(spans: Callable[[str], list[tuple[int, int]]], text: str) -> list[tuple[int, int]]:
    """`spans` of each piece of a long text (pieces()), shifted to the text's offsets: no
    sentence crosses a piece's end."""
    out: list[tuple[int, int]] = []
    for start, end in pieces(text):
        out += [(start + s, start + e) for s, e in spans(text[start:end])]
    return out


class Verdict:
    """What one of the fast segmenter's paths decided about a caption. (Plain class constants,
    not an Enum: they are checked for every caption, and Enum member access costs more.)"""

    SETTLED = "settled"  # the spans are the answer
    UNSETTLED = "unsettled"  # the plain path cannot tell: the detailed scan decides
    WHOLE_TO_PYSBD = "whole"  # pysbd must see the whole caption (list items, unpaired brackets)


class FastSplit:
    __slots__ = ("verdict", "spans")

    def __init__(self, verdict: str, spans: list[tuple[int, int]] | None = None):
        self.verdict = verdict
        self.spans = spans  # set when SETTLED

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FastSplit) and (self.verdict, self.spans) == (other.verdict, other.spans)

    def __repr__(self) -> str:
        return f"FastSplit({self.verdict!r}, {self.spans!r})"


UNSETTLED = FastSplit(Verdict.UNSETTLED)
WHOLE_TO_PYSBD = FastSplit(Verdict.WHOLE_TO_PYSBD)
