"""Sentence segmenters with exact character spans.

Three segmenters share one interface (`spans(text)` -> [(start, end)], with
`text[start:end]` the stripped, non-empty sentence):

- `fast` (default): a single-pass scan that settles captions whose every
  boundary is unambiguous ("word. Capital", "?", "!", end of text) and hands any
  caption with a doubtful mark (abbreviation, initial, quote, ellipsis, newline,
  list number, ...) to pysbd whole, so its output equals pysbd's there by construction.
- `pysbd`: pysbd's rule-based English segmenter (clean=False), spans re-aligned.
- `spacy`: an installed English spaCy model's senter/parser, else spacy.blank("en")
  with the rule-based sentencizer.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Protocol

from caption_debias.errors import UserError

SEGMENTERS = ("fast", "pysbd", "spacy")


class Segmenter(Protocol):
    name: str

    def spans(self, text: str) -> list[tuple[int, int]]: ...

    def describe(self) -> dict: ...


def _tight(text: str, start: int, end: int) -> tuple[int, int] | None:
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
            t = _tight(text, pending_start, i)
            if t:
                spans.append(t)
            pending_start = None
        spans.append((i, i + len(s)))
        pos = i + len(s)
    if pending_start is not None or pos < len(text):
        t = _tight(text, pending_start if pending_start is not None else pos, len(text))
        if t:
            spans.append(t)
    return spans


class PysbdSegmenter:
    name = "pysbd"

    def __init__(self):
        import pysbd

        self._seg = pysbd.Segmenter(language="en", clean=False)
        self._version = getattr(pysbd, "__version__", "unknown")

    def spans(self, text: str) -> list[tuple[int, int]]:
        if not text or text.isspace():
            return []
        return align_sentences(text, self._seg.segment(text))

    def describe(self) -> dict:
        return {"name": self.name, "library": "pysbd", "version": self._version, "language": "en", "clean": False}


class SpacySegmenter:
    name = "spacy"

    def __init__(self):
        import spacy

        self._version = spacy.__version__
        self.pipeline = None
        for model in ("en_core_web_sm", "en_core_web_md", "en_core_web_lg", "en_core_web_trf"):
            try:
                nlp = spacy.load(model, exclude=["ner", "lemmatizer", "textcat"])
            except OSError:
                continue
            if "senter" in nlp.pipe_names or "senter" in nlp.disabled:
                # the statistical sentence recogniser alone is faster than the parser
                nlp.enable_pipe("senter") if "senter" in nlp.disabled else None
                keep = {"tok2vec", "senter"}
                self.method = "senter"
            else:
                keep = {"tok2vec", "parser"}
                self.method = "parser"
            for pipe in list(nlp.pipe_names):
                if pipe not in keep:
                    nlp.disable_pipe(pipe)
            self.nlp, self.pipeline = nlp, model
            break
        if self.pipeline is None:
            nlp = spacy.blank("en")
            nlp.add_pipe("sentencizer")
            self.nlp, self.pipeline, self.method = nlp, "blank:en", "sentencizer"
        self.nlp.max_length = 10_000_000

    def spans(self, text: str) -> list[tuple[int, int]]:
        if not text or text.isspace():
            return []
        out = []
        for sent in self.nlp(text).sents:
            t = _tight(text, sent.start_char, sent.end_char)
            if t:
                out.append(t)
        return out

    def describe(self) -> dict:
        return {"name": self.name, "library": "spacy", "version": self._version, "pipeline": self.pipeline, "method": self.method}


# --- fast ----------------------------------------------------------------------------

def _pysbd_abbreviations() -> frozenset[str]:
    from pysbd.lang.english import English

    ab = English.Abbreviation
    return frozenset(a.lower() for a in (*ab.ABBREVIATIONS, *ab.PREPOSITIVE_ABBREVIATIONS, *ab.NUMBER_ABBREVIATIONS))


# Characters outside this set (quotes, brackets, newlines, tabs, ellipsis, non-ASCII
# punctuation, ...) make pysbd apply rules we do not re-implement: such captions go to it.
_SAFE_TEXT = re.compile(r"[A-Za-z0-9 ,;:'\-/%&+$#*=@.!?()\u00C0-\u024F]*")
# Every sentence-final mark with the word before it and what follows it.
_MARK = re.compile(r"([A-Za-z0-9'\-/%&+$#*=@()\u00C0-\u024F]*)([.!?]+)(\s*)")


class FastSegmenter:
    """Decides easy captions itself and gives the doubtful ones to pysbd whole.

    A caption is easy when it has only ordinary characters and each [.!?] run is one
    of: the end of the text; a single mark after a plain word of 2+ letters that is
    not an abbreviation pysbd knows, followed by one space and a capital letter
    (a boundary); a decimal point between digits (not a boundary). Everything else
    (e.g. "Dr. Smith", "U.S.", "a.m.", "...", "1. item", quotes, newlines, a lower-case
    word after a period) is decided by pysbd, so the fast path never has to guess.
    """

    name = "fast"

    def __init__(self):
        self._pysbd = PysbdSegmenter()
        self._abbrev = _pysbd_abbreviations()
        self.calls = 0
        self.delegated = 0

    def _easy_spans(self, text: str) -> list[tuple[int, int]] | None:
        if _SAFE_TEXT.fullmatch(text) is None:
            return None
        n = len(text)
        cuts = [0]
        for m in _MARK.finditer(text):
            word, marks, space = m.group(1), m.group(2), m.group(3)
            after = m.end()
            if after >= n:  # end of text: the last sentence closes here
                break
            if marks == "." and not space and word[-1:].isdigit() and text[after].isdigit():
                continue  # decimal "3.5"; no boundary
            if len(marks) != 1 or space != " " or not text[after].isupper():
                return None
            if marks == "." and (
                len(word) < 2 or not word.isalpha() or word.lower() in self._abbrev or word.isupper()
            ):
                return None
            if marks != "." and not word[-1:].isalpha():
                return None
            cuts.append(m.end(2))
        cuts.append(n)
        out = []
        for a, b in zip(cuts, cuts[1:]):
            t = _tight(text, a, b)
            if t:
                out.append(t)
        return out

    def spans(self, text: str) -> list[tuple[int, int]]:
        self.calls += 1
        if not text or text.isspace():
            return []
        easy = self._easy_spans(text)
        if easy is not None:
            return easy
        self.delegated += 1
        return self._pysbd.spans(text)

    def describe(self) -> dict:
        return {
            "name": self.name,
            "method": "unambiguous captions split by a single regex pass; any other caption by pysbd",
            "fallback": self._pysbd.describe(),
        }


@lru_cache(maxsize=None)
def get_segmenter(name: str = "fast") -> Segmenter:
    """A segmenter by name (one of SEGMENTERS); built once per process."""
    if name == "fast":
        return FastSegmenter()
    if name == "pysbd":
        return PysbdSegmenter()
    if name == "spacy":
        return SpacySegmenter()
    raise UserError(f"unknown segmenter {name!r}: choose one of {', '.join(SEGMENTERS)}")
