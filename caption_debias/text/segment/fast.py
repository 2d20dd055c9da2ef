"""The default segmenter: sure boundaries decided here, doubtful stretches by pysbd."""

from __future__ import annotations

from caption_debias.text.segment.base import PIECE_CHARS, Segmenter, Verdict, spans_in_pieces
from caption_debias.text.segment.plain import PlainPath
from caption_debias.text.segment.pysbd_segmenter import PysbdSegmenter
from caption_debias.text.segment.scan import Boundaries, DetailedScan


class FastSegmenter(Segmenter):
    """pysbd's sentences, with pysbd asked only where a rule of its could go either way.

    Sure are, for each [.!?] run: the end of a line or of the text; a single mark followed by
    spaces and a capital after a plain word (2+ letters, not all capitals, not an
    abbreviation pysbd keeps together), an all-caps or capitals-and-digits token no pysbd
    abbreviation matches, a quote, or a time "08:45" (a boundary); a decimal point "3.5"
    (no boundary). Marks inside double quotes never split; a quote ending in a mark splits
    before a capital and not before anything else. Line breaks always end a sentence, as
    in pysbd. Everything else ("Dr. Smith", "U.S.", "a.m.", "...", "?!", a lower-case word
    after a period, odd characters) makes the stretch between the sure boundaries around it
    go to pysbd; list items, unbalanced parentheses, brackets, bullets and control
    characters send the whole caption. So the fast path never guesses: its output is pysbd's.

    Most captions are settled by the plain path (plain.py); the others by the detailed scan
    (scan.py).
    """

    name = "fast"

    def __init__(self):
        self._pysbd = PysbdSegmenter()
        boundaries = Boundaries()
        self._plain = PlainPath(boundaries)
        self._detailed = DetailedScan(boundaries, self._ask_pysbd)
        self.calls = 0
        self.delegated = 0  # captions given to pysbd whole
        self.pysbd_stretches = 0  # stretches of a caption given to pysbd

    def _ask_pysbd(self, stretch: str) -> list[tuple[int, int]]:
        self.pysbd_stretches += 1
        return self._pysbd.spans(stretch)

    def spans(self, text: str) -> list[tuple[int, int]]:
        self.calls += 1
        if not text or text.isspace():
            return []
        if len(text) > PIECE_CHARS:
            return spans_in_pieces(self.spans, text)
        split = self._plain.split(text)
        if split.verdict is Verdict.UNSETTLED:
            split = self._detailed.split(text)
        if split.verdict is Verdict.SETTLED:
            return split.spans
        self.delegated += 1
        return self._pysbd.spans(text)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "method": (
                "sure boundaries settled by rules read from pysbd's; each stretch holding a doubtful mark, "
                "and captions with list items, brackets or unbalanced parentheses, split by pysbd"
            ),
            "fallback": self._pysbd.describe(),
        }
