"""pysbd's rule-based English segmenter (clean=False), spans re-aligned, answers remembered."""

from __future__ import annotations

from caption_debias.text.segment.base import PIECE_CHARS, Segmenter, align_sentences, spans_in_pieces

_MAX_CACHED_TEXTS = 20_000  # the answers cache: ~20 MB at most on long captions


class PysbdSegmenter(Segmenter):
    name = "pysbd"

    def __init__(self):
        import pysbd

        self._seg = pysbd.Segmenter(language="en", clean=False)
        self._version = getattr(pysbd, "__version__", "unknown")
        # text -> its spans. pysbd's answer depends on the text alone (a fresh Processor per
        # call, rules fixed at import), and the fast segmenter hands it the same stretches
        # ("Dr. Smith ..." with its trailing space) over and over.
        self._cache: dict[str, tuple[tuple[int, int], ...]] = {}

    def spans(self, text: str) -> list[tuple[int, int]]:
        if not text or text.isspace():
            return []
        if len(text) > PIECE_CHARS:
            return spans_in_pieces(self.spans, text)
        got = self._cache.get(text)
        if got is None:
            # the processor's sentences aligned by str.find: the spans of pysbd's segment(),
            # which re-finds every sentence with a freshly compiled regex (half its time)
            got = tuple(align_sentences(text, self._seg.processor(text).process()))
            if len(self._cache) >= _MAX_CACHED_TEXTS:  # bound memory on endless input
                self._cache.clear()
            self._cache[text] = got
        return list(got)

    def describe(self) -> dict:
        return {"name": self.name, "library": "pysbd", "version": self._version, "language": "en", "clean": False}
