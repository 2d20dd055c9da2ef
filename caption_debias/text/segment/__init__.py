"""Sentence segmenters with exact character spans, one class per backend behind `Segmenter`.

- `fast` (default, fast.py): settles every boundary it is sure of and hands only the
  stretches around a doubtful mark to pysbd, so its output is pysbd's; pysbd_rules.py
  holds what it knows of pysbd's rules, plain.py and scan.py apply them.
- `pysbd` (pysbd_segmenter.py): pysbd's rule-based English segmenter (clean=False).
- `spacy` (spacy_segmenter.py): an installed English spaCy model's senter/parser, else
  spacy.blank("en") with the rule-based sentencizer.
"""

from __future__ import annotations

from functools import lru_cache

from caption_debias.errors import UserError
from caption_debias.text.segment.base import Segmenter, align_sentences
from caption_debias.text.segment.fast import FastSegmenter
from caption_debias.text.segment.pysbd_segmenter import PysbdSegmenter

SEGMENTERS = ("fast", "pysbd", "spacy")

__all__ = ["SEGMENTERS", "FastSegmenter", "PysbdSegmenter", "Segmenter", "align_sentences", "get_segmenter"]


@lru_cache(maxsize=None)
def get_segmenter(name: str = "fast") -> Segmenter:
    """A segmenter by name (one of SEGMENTERS); built once per process."""
    if name == "fast":
        return FastSegmenter()
    if name == "pysbd":
        return PysbdSegmenter()
    if name == "spacy":
        from caption_debias.text.segment.spacy_segmenter import SpacySegmenter

        return SpacySegmenter()
    raise UserError(f"unknown segmenter {name!r}: choose one of {', '.join(SEGMENTERS)}")
