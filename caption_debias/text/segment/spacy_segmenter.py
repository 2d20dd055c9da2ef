"""An installed English spaCy pipeline's senter or parser, else spacy.blank("en") with the rule-based sentencizer."""

from __future__ import annotations

from caption_debias.extras import require
from caption_debias.text.segment.base import PIECE_CHARS, Segmenter, spans_in_pieces, tight

_PIPELINES = ("en_core_web_sm", "en_core_web_md", "en_core_web_lg", "en_core_web_trf")


class SpacySegmenter(Segmenter):
    name = "spacy"

    def __init__(self):
        spacy = require("spacy", "--segmenter spacy")
        self._version = spacy.__version__
        self.pipeline = None
        for model in _PIPELINES:
            try:
                nlp = spacy.load(model, exclude=["ner", "lemmatizer", "textcat"])
            except OSError:
                continue
            if "senter" in nlp.pipe_names or "senter" in nlp.disabled:
                # the statistical sentence recogniser alone is faster than the parser
                if "senter" in nlp.disabled:
                    nlp.enable_pipe("senter")
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
        if len(text) > PIECE_CHARS:
            return spans_in_pieces(self.spans, text)
        out = []
        for sent in self.nlp(text).sents:
            t = tight(text, sent.start_char, sent.end_char)
            if t:
                out.append(t)
        return out

    def describe(self) -> dict:
        return {
            "name": self.name,
            "library": "spacy",
            "version": self._version,
            "pipeline": self.pipeline,
            "method": self.method,
        }
