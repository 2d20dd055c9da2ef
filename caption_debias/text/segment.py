"""Sentence segmenters with exact character spans.

Three segmenters share one interface (`spans(text)` -> [(start, end)], with
`text[start:end]` the stripped, non-empty sentence):

- `fast` (default): a single-pass scan that settles every boundary it is sure of
  ("word. Capital", "?", "!", line breaks, decimals, quotes) and hands only the
  stretches around a doubtful mark (abbreviation, initial, ellipsis, ...) to pysbd, so
  its output is pysbd's by construction, at a fraction of the cost.
- `pysbd`: pysbd's rule-based English segmenter (clean=False), spans re-aligned.
- `spacy`: an installed English spaCy model's senter/parser, else spacy.blank("en")
  with the rule-based sentencizer.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import chain
from typing import Protocol

import regex

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


_MAX_CACHED_TEXTS = 20_000  # PysbdSegmenter's cache: ~20 MB at most on long captions


class PysbdSegmenter:
    name = "pysbd"

    def __init__(self):
        import pysbd

        self._seg = pysbd.Segmenter(language="en", clean=False)
        self._version = getattr(pysbd, "__version__", "unknown")
        # text -> its spans. pysbd's answer depends on the text alone (a fresh Processor per
        # call, rules fixed at import), and the fast segmenter hands it the same stretches
        # ("Dr. Smith ..." with its trailing space) over and over, also when sentences come
        # in another order; ~0.5 ms a call saved on every repeat.
        self._cache: dict[str, tuple[tuple[int, int], ...]] = {}

    def spans(self, text: str) -> list[tuple[int, int]]:
        if not text or text.isspace():
            return []
        got = self._cache.get(text)
        if got is None:
            # pysbd's segment() then re-finds every sentence in the text with a freshly
            # compiled regex (half its time); the processor's sentences, aligned by
            # str.find, give the same spans.
            got = tuple(align_sentences(text, self._seg.processor(text).process()))
            if len(self._cache) >= _MAX_CACHED_TEXTS:  # bound memory on endless input
                self._cache.clear()
            self._cache[text] = got
        return list(got)

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
        out = []
        for sent in self.nlp(text).sents:
            t = _tight(text, sent.start_char, sent.end_char)
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


# --- fast ----------------------------------------------------------------------------


def _pysbd_abbreviations() -> tuple[frozenset[str], frozenset[str]]:
    """(all abbreviations pysbd knows, those it never ends a sentence after).

    Probing pysbd 0.3.4 showed: after an ordinary abbreviation ("co.", "man.", "etc.")
    it splits before a capitalised word (except "I"), as after any word; after a
    prepositive one ("Dr.", "St.", "Mt."), a dotted one ("e.g.", "U.S.") and "fig.",
    "ph.", "v.", "vs." it never does. tests/test_text_segment.py re-checks this.
    """
    from pysbd.lang.english import English

    ab = English.Abbreviation
    every = frozenset(a.lower() for a in (*ab.ABBREVIATIONS, *ab.PREPOSITIVE_ABBREVIATIONS, *ab.NUMBER_ABBREVIATIONS))
    never = frozenset(
        {a.lower() for a in ab.PREPOSITIVE_ABBREVIATIONS}
        | {a for a in every if "." in a}
        | {"fig", "ph", "v", "vs", "st"}
    )
    return every, never


@lru_cache(maxsize=1)
def _pysbd_abbreviation_pattern() -> re.Pattern:
    """Tokens whose period pysbd's AbbreviationReplacer can protect: it finds each entry of
    its three lists with r"(?:^|\\s|\r|\n)" + entry (unescaped, IGNORECASE: "u.s" also
    matches "UPS") and then replaces the period after the matched text wherever it follows
    a space; an all-caps or numeric token matching none of them is never touched there."""
    from pysbd.lang.english import English

    ab = English.Abbreviation
    entries = {a.strip() for a in (*ab.ABBREVIATIONS, *ab.PREPOSITIVE_ABBREVIATIONS, *ab.NUMBER_ABBREVIATIONS)}
    return re.compile("|".join(f"(?:{a})" for a in sorted(entries)), re.IGNORECASE)


# An all-caps ASCII word or a token of capitals and digits ("BMW", "SUV", "501", "W188"),
# not a number of one or two digits (pysbd's list items "12. ", its start-of-line rules).
_CAPS_OR_NUMBER = re.compile(r"(?!\d{1,2}\Z)[A-Z0-9]{2,}")


# Characters with no sentence-splitting rule of their own in pysbd: letters, digits and
# ordinary punctuation. Anything else (brackets, ellipsis "\u2026", tabs, bullets, CJK
# marks, control characters, ...) is left to pysbd (see _UNSAFE_CHAR).
_SAFE_TEXT = regex.compile(
    r"[\p{L}\p{N}\p{M} \xa0\n\r,;:'\-/%&+$#*=@.!?()\u2018\u2019\u201c\u201d\"\u2013\u2014\u00b0\u00d7\u00bc-\u00be\u00b2\u00b3]*"
)
# Double-quoted stretches. pysbd never splits inside them; a stretch ending in one mark
# ('reads "Stop." The') ends a sentence when a capital follows, as a word would.
_DOUBLE_QUOTED = re.compile(r"\"([^\"\n]*)\"|\u201c([^\u201d\u201c\n]*)\u201d")
_DOUBLE_QUOTE_CHAR = re.compile(r"[\"\u201c\u201d]")
# Single-quoted stretches (not apostrophes); pysbd's rules there are subtler: one holding
# a mark is left to pysbd.
_SINGLE_QUOTED = regex.compile(r"(?<![\p{L}\p{N}])['\u2018][^'\u2019\n]*['\u2019](?![\p{L}\p{N}])")
# Every run of sentence marks (the token before it is found with rfind: a lazy
# "\S*?" prefix in the pattern made this scan 10x slower).
_MARK = re.compile(r"([.!?]+)[ \xa0]*")  # with the spaces after it
# ASCII safe text plus curly quotes, dashes and no-break spaces: the common non-ASCII
# captions, checked with the stdlib engine (4x faster than _SAFE_TEXT's \p classes).
_SAFE_TYPOGRAPHIC = re.compile(r"[A-Za-z0-9 \n\r,;:'\-/%&+$#*=@.!?()\"\u2018\u2019\u201c\u201d\u2013\u2014\xa0]*")
_UNSAFE_ASCII = re.compile(r"[^A-Za-z0-9 \n\r,;:'\-/%&+$#*=@.!?()\"]")  # _SAFE_TEXT for ASCII, 5x faster


def _has_opening_single_quote(text: str) -> bool:
    """A ' or \u2018 not preceded by a letter or digit (apostrophes are, and are common)."""
    for ch in ("'", "\u2018"):
        i = text.find(ch)
        while i >= 0:
            if i == 0 or not text[i - 1].isalnum():
                return True
            i = text.find(ch, i + 1)
    return False


# A plain word: letters, possibly joined by hyphens or apostrophes ("t-shirt", "woman's").
_PLAIN_WORD = regex.compile(r"\p{L}+(?:['\u2019\-]\p{L}+)*")
_WORD_PART = regex.compile(r"['\u2019\-]")
_TIME = regex.compile(r"\d{1,2}:\d{2}")
_QUOTE_END = regex.compile(r".*[\"\u201d]")
_CAPITALISED = regex.compile(r"\p{Lu}\p{Ll}")
# "1) item", "a) item", "iv) item", "(x)": pysbd splits list items even without a period.
_LIST_MARKER = regex.compile(r"(?:^|\s)[\p{L}\p{N}]{1,3}\)|\((?:[a-z]|[ivx]{2,4})\)")
# The same test starting at each ")" (regex's variable-width lookbehind): a search that
# jumps from parenthesis to parenthesis instead of trying every position; tested equal.
_LIST_MARKER_CLOSE = regex.compile(r"\)(?<=(?:^|\s)[\p{L}\p{N}]{1,3}\)|\((?:[a-z]|[ivx]{2,4})\))")
# "1. item", "a. item", "iv. item": pysbd's list rules look at the whole text.
_LIST_ITEM_TOKEN = re.compile(r"\d{1,2}|[A-Za-z]|[ivxIVX]{2,4}")


# The period of such an item, followed by whitespace (re's \s and \S are str.isspace
# here). The pattern starts with the period so that the search jumps from period to period
# (a lookbehind or alternation first made it test every position, 4x slower than a loop).
_LIST_ITEM_PERIOD = re.compile(
    r"\.(?=\s)(?:(?<=(?<!\S)\d\.)|(?<=(?<!\S)\d\d\.)|(?<=(?<!\S)[A-Za-z]\.)"
    r"|(?<=(?<!\S)[ivxIVX]{2}\.)|(?<=(?<!\S)[ivxIVX]{3}\.)|(?<=(?<!\S)[ivxIVX]{4}\.))"
)


def _list_item_periods(text: str) -> list[int]:
    """Periods of whitespace-delimited "1." / "a." / "iv." followed by whitespace (the
    reference definition; the segmenter searches _LIST_ITEM_PERIOD, tested equal)."""
    out = []
    i = text.find(".")
    while i >= 0:
        if i + 1 < len(text) and text[i + 1].isspace():
            j = i - 1
            while j >= 0 and i - j <= 5 and not text[j].isspace():
                j -= 1
            if (j < 0 or text[j].isspace()) and _LIST_ITEM_TOKEN.fullmatch(text, j + 1, i):
                out.append(i)
        i = text.find(".", i + 1)
    return out


_PARAGRAPH_BREAK = regex.compile(r"[ \xa0]*[\r\n]\s*")
_HIDDEN = "\x00"  # fills quoted text in the scanned copy; never in safe text
_LINE = re.compile(r"[^\r\n]+")
_BLOCK = "\x01"  # fills a stretch around unpaired quotes (quotes and line breaks included); never in safe text


@lru_cache(maxsize=1)
def _pysbd_quote_regions() -> tuple[re.Pattern, re.Pattern]:
    """pysbd's own patterns for the double-quoted stretches whose marks it protects
    (straight quotes pair up in order, a \u201c with the next \u201d)."""
    from pysbd.between_punctuation import BetweenPunctuation as bp

    return re.compile(bp.BETWEEN_DOUBLE_QUOTES_REGEX_2), re.compile(bp.BETWEEN_QUOTE_SLANTED_REGEX_2)


def _irregular_quote_blocks(text: str) -> list[tuple[int, int]]:
    """Disjoint [start, end) blocks holding every double quote that is not in a pair as
    _DOUBLE_QUOTED finds them, every stretch pysbd protects that is not such a pair, and
    every pair or protected stretch overlapping those. Each block goes to pysbd within the
    stretch between the sure boundaries around it, so pysbd sees all quotes it pairs with
    each other together (quotes outside the blocks are in pairs on which both agree)."""
    pairs = [q.span() for q in _DOUBLE_QUOTED.finditer(text)]
    paired = set(pairs)
    straight, curly = _pysbd_quote_regions()
    regions = [  # pysbd pairs quotes within each line (it splits at line breaks first)
        m.span() for line in _LINE.finditer(text) for pat in (straight, curly) for m in pat.finditer(text, *line.span())
    ]
    spans = [r for r in regions if r not in paired]
    inside = bytearray(len(text))
    for a, b in pairs:
        inside[a:b] = b"\x01" * (b - a)
    spans += [(m.start(), m.end()) for m in _DOUBLE_QUOTE_CHAR.finditer(text) if not inside[m.start()]]
    if not spans:
        return []
    others = pairs + regions
    blocks = sorted(spans)
    while True:  # merge overlapping blocks, and pull in pairs/regions overlapping one
        merged: list[list[int]] = []
        for a, b in sorted(blocks + [r for r in others if any(x < r[1] and r[0] < y for x, y in blocks)]):
            if merged and a < merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        new = [(a, b) for a, b in merged]
        if new == blocks:
            return blocks
        blocks = new


# Characters outside _SAFE_TEXT; those that pair up across sentences or start list items
# send the whole caption to pysbd, the others only the stretch around them.
_UNSAFE_CHAR = regex.compile(
    r"[^\p{L}\p{N}\p{M} \xa0\n\r,;:'\-/%&+$#*=@.!?()\u2018\u2019\u201c\u201d\"\u2013\u2014\u00b0\u00d7\u00bc-\u00be\u00b2\u00b3]"
)
_PAIRED_OR_LIST_CHAR = re.compile(r"[\[\]{}\u2022\u2023\u25e6\u2043\u2219\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_PAREN_GROUP = re.compile(r"\([^()]*\)")


def _parentheses_are_balanced(text: str) -> bool:
    """Every parenthesis in an unnested pair."""
    rest = _PAREN_GROUP.sub("", text)
    return "(" not in rest and ")" not in rest


# --- the plain path: most captions settled by a few C-level passes, no loop per mark.
# Characters it accepts (ASCII letters, digits, spaces, line breaks, common punctuation,
# curly double quotes and apostrophes, dashes, Latin letters with accents: a capital one
# after a period is no _PLAIN_CUT, so that period is left to the detailed path); any other
# caption takes the detailed path.
_PLAIN_TEXT = re.compile(
    r"[A-Za-z0-9 \n,;:'\-/%&+$#*=@.!?\"\u201c\u201d\u2019\u2013\u2014\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]*"
)
# _has_opening_single_quote for plain text, or more (after an accented letter): then only
# _SINGLE_QUOTED is searched as well, which finds no quote there either
_OPENING_APOSTROPHE = re.compile(r"'(?<![A-Za-z0-9]')")
# Each pattern starts with the period itself, so that the search jumps from period to period.
# A sure boundary if the word before it is sure: spaces, then a capital. group(1)'s
# span is (sentence end, next sentence start).
_PLAIN_CUT = re.compile(r"\.( +)(?=[A-Z])")
_PLAIN_DECIMAL = re.compile(r"\.(?=\d)(?<=\d\.)")  # "3.5": no boundary
_PLAIN_LINE_END = re.compile(r"\.(?= *(?:\n|\Z))(?<!\.\.)")  # one period at a line end: no boundary of its own
_PLAIN_BREAK = re.compile(r"\n\s*")
_UNSETTLED = False  # _plain_spans: "take the detailed path"


# _DOUBLE_QUOTED's two halves: a search for a literal first character jumps ahead, one for
# either of two is 5-8x slower (captions with both kinds use _DOUBLE_QUOTED itself).
_STRAIGHT_QUOTED = re.compile(r"\"[^\"\n]*\"")
_CURLY_QUOTED = re.compile(r"\u201c[^\u201d\u201c\n]*\u201d")


def _plain_quote_copy(text: str) -> str | None:
    """_scan_copy's copy for plain text whose double quotes all pair up (no quote inside a
    pair), built from slices, or None when the detailed path has to decide (a doubt, an
    irregular quote, or a case outside those below).

    When no pair holds a mark, the text itself: hiding a pair changes no verdict then (the
    only marks are outside the pairs, and a token reaching into a pair holds its closing
    quote either way, as its last character or not). Otherwise every pair is hidden as
    _scan_copy does, with one change: a mark that ends a quote and is followed by neither
    one space and a capital nor the end of a line is hidden too (_line_cuts skips it when
    the token before it starts with the opening quote, which is required here)."""
    if '""' in text or "\u201c\u201d" in text:
        return None
    curly = "\u201c" in text or "\u201d" in text
    pattern = (_DOUBLE_QUOTED if '"' in text else _CURLY_QUOTED) if curly else _STRAIGHT_QUOTED
    pairs = pattern.findall(text) if pattern is not _DOUBLE_QUOTED else [m.group() for m in pattern.finditer(text)]
    if text.count('"') + (text.count("\u201c") + text.count("\u201d") if curly else 0) != 2 * len(pairs):
        return None  # a quote outside the pairs (or inside one): pysbd may pair them otherwise
    inside = "".join(pairs)
    if "." not in inside and "!" not in inside and "?" not in inside:
        return text
    n = len(text)
    parts = []
    pos = 0
    for q in pattern.finditer(text):
        a, b = q.span()
        a += 1
        b -= 1  # inside the quotes; inner is never empty ('""' ruled out above)
        inner = text[a:b]
        last = inner[-1]
        if last in ".!?":
            if len(inner) > 1 and inner[-2] in ".!?":
                return None
            j = b + 1
            if j < n and text[j] in ".!?":
                return None  # the mark run goes on past the quote
            k = j
            while k < n and text[k] == " ":
                k += 1
            if k == n or text[k] == "\n" or (k == j + 1 and "A" <= text[k] <= "Z"):
                close = last  # a line end, or a cut _PLAIN_CUT sees
            elif k > j and text[k].isupper():
                return None  # '"Stop."  The': a doubt
            elif a == 1 or text[a - 2] in " \n":
                close = _HIDDEN  # '"Go!" and left', '"Stop.",': no boundary, no doubt
            else:
                return None
        elif inner.rstrip()[-1:] in (".", "!", "?"):
            return None
        else:
            close = text[b]
        parts += (text[pos:a], _HIDDEN * (b - a), close)
        pos = b + 1
    parts.append(text[pos:])
    return "".join(parts)


def _has_mark(s: str) -> bool:
    return "." in s or "!" in s or "?" in s


def _filled(text: str, fills: list[tuple[int, int, str]]) -> str:
    """`text` with each text[a:b] replaced by its same-length fill, later fills over earlier
    ones: joined from slices when the fills do not overlap (the rule), else char by char."""
    if not fills:
        return text
    ordered = sorted(fills)
    if all(x[1] <= y[0] for x, y in zip(ordered, ordered[1:])):
        parts = []
        pos = 0
        for a, b, fill in ordered:
            parts += (text[pos:a], fill)
            pos = b
        parts.append(text[pos:])
        return "".join(parts)
    chars = list(text)
    for a, b, fill in fills:
        chars[a:b] = fill
    return "".join(chars)


class FastSegmenter:
    """Decides sure boundaries itself and leaves the doubtful stretches to pysbd.

    Sure are, for each [.!?] run: the end of a line or of the text; a single mark followed by
    spaces and a capital after a plain word (2+ letters, not all capitals, not an
    abbreviation pysbd keeps together), a quote, or a time "08:45" (a boundary); a
    decimal point "3.5" (no boundary). Marks inside double quotes never split; a quote
    ending in a mark splits before a capital and not before anything else. Line breaks
    always end a sentence, as in pysbd. Everything else ("Dr. Smith", "U.S.", "a.m.",
    "...", "?!", a lower-case word after a period, odd characters) makes the stretch
    between the sure boundaries around it go to pysbd; unpaired quotes or parentheses,
    brackets, bullets and list items send the whole caption. So the fast path never
    guesses: its output is pysbd's (docs/text.md has the figures).

    Most captions (plain characters, every period a sure boundary, a decimal point or a
    line end) are settled by _plain_spans with a few regex passes and no loop per mark;
    the others take _detailed_spans. Both give the same spans (tested).
    """

    name = "fast"

    def __init__(self):
        self._pysbd = PysbdSegmenter()
        self._abbrev, self._abbrev_never = _pysbd_abbreviations()
        self._boundary_cache: dict[tuple[str, str], bool | None] = {}  # (word, next two characters)
        self._sure_tokens: set[str] = set()  # tokens after which "X. Capital" is a boundary
        self.calls = 0
        self.delegated = 0  # captions given to pysbd whole
        self.pysbd_stretches = 0  # stretches of a caption given to pysbd

    def _boundary_after(self, word: str, next_text: str) -> bool | None:
        """True: split after `word` + one mark before `next_text`; None: not sure."""
        # keyed by the next two characters themselves, so a hit (in _line_cuts) needs no regex
        key = (word, next_text)
        hit = self._boundary_cache.get(key, 0)
        if hit == 0:
            if len(self._boundary_cache) > 200_000:  # bound memory on endless vocabularies
                self._boundary_cache.clear()
            hit = self._boundary_cache[key] = self._decide_boundary(word, _CAPITALISED.match(next_text) is not None)
        return hit

    def _decide_boundary(self, word: str, capitalised_next: bool) -> bool | None:
        if _QUOTE_END.fullmatch(word) or _TIME.fullmatch(word):
            return True
        if _CAPS_OR_NUMBER.fullmatch(word) is not None and _pysbd_abbreviation_pattern().fullmatch(word) is None:
            # pysbd 0.3.4 keeps such a period only through rules that need something this
            # "TOKEN. Capital" lacks: a listed abbreviation (excluded above), a single capital
            # (SingleLetterAbbreviationRules), dotted letters (MULTI_PERIOD_ABBREVIATION_REGEX),
            # a digit or non-space after the period (Numbers.PeriodBeforeNumberRule,
            # NumberAfterPeriodBeforeLetterRule, NUMBERED_REFERENCE_REGEX), a one- or two-digit
            # number (list items, Start/NewLine number rules). It splits, before "I" too.
            return True
        if len(word) < 2 or word.isupper() or _PLAIN_WORD.fullmatch(word) is None:
            return None
        for part in _WORD_PART.split(word):
            p = part.lower()
            if p in self._abbrev_never:
                return None
            if p in self._abbrev and not capitalised_next:
                return None
        return True

    def _line_cuts(self, scan: str, start: int, stop: int, cuts: list[int], doubts: list[int]) -> None:
        """Append the sure sentence ends inside scan[start:stop] (one line) to `cuts`, and
        the positions of marks the fast path cannot decide to `doubts`."""
        nbsp = "\xa0" in scan  # rare: skip its rfind otherwise
        boundary_cache = self._boundary_cache
        for m in _MARK.finditer(scan, start, stop):  # endpos keeps the spaces inside the line
            m_start, after = m.span()
            m_end = m.end(1)
            if after >= stop:
                if m_end - m_start != 1:
                    doubts.append(m_start)  # "sun.." at a line end: pysbd splits it oddly
                continue
            # the token from the last space or the line's start (rfind's -1 used to take
            # the caption from its very start for a line's first word: a needless doubt)
            word = scan[
                max(start - 1, scan.rfind(" ", start, m_start), scan.rfind("\xa0", start, m_start) if nbsp else -1)
                + 1 : m_start
            ]
            if word[:1] in ('"', "\u201c") and word.endswith(_HIDDEN):  # '"Stop.' seen as '"\0\0\0\0.'
                if after > m_end and scan[after].isupper():
                    if after - m_end == 1 and scan[m_end] == " " and "A" <= scan[after] <= "Z":
                        cuts.append(m_end)
                    else:  # 'reads "X."  In', '"Hi." Élan': pysbd keeps them together
                        doubts.append(m_start)
                continue  # '"Go!" and left': no boundary
            if after == m_end:  # no space
                if m_end - m_start == 1 and scan[m_start] == "." and word[-1:].isdigit() and scan[after].isdigit():
                    continue  # decimal "3.5"
                doubts.append(m_start)
            elif (
                m_end - m_start != 1
                or not scan[after].isupper()
                or not (
                    boundary_cache.get((word, scan[after : after + 2]))
                    or self._boundary_after(word, scan[after : after + 2])
                )
            ):
                doubts.append(m_start)
            else:
                cuts.append(m_end)

    def _scan_copy(self, text: str) -> tuple[str, list[int]] | None:
        """`text` with quoted and bracketed text hidden (same length), and the starts of
        hidden stretches pysbd must look at; None when quotes or brackets are unpaired."""
        doubts: list[int] = []
        has_double = '"' in text or "\u201c" in text or "\u201d" in text
        has_paren = "(" in text or ")" in text
        has_single = _has_opening_single_quote(text)
        if not (has_double or has_paren or has_single):
            return text, doubts
        fills: list[tuple[int, int, str]] = []  # (start, end, replacement of text[start:end]), in order

        if has_paren:
            if not _parentheses_are_balanced(text):
                return None
            for g in _PAREN_GROUP.finditer(text):
                if _has_mark(g.group()):  # pysbd never splits inside: it decides
                    a, b = g.start() + 1, g.end() - 1
                    fills.append((a, b, _HIDDEN * (b - a)))
                    doubts.append(g.start())
        if has_single:
            for q in _SINGLE_QUOTED.finditer(text):
                if _has_mark(q.group()):
                    a, b = q.start() + 1, q.end() - 1
                    fills.append((a, b, _HIDDEN * (b - a)))
                    doubts.append(q.start())
        if has_double:
            blocks: list[tuple[int, int]] = []
            if (
                _DOUBLE_QUOTE_CHAR.search(_DOUBLE_QUOTED.sub("", text)) is not None
                or '""' in text
                or "\u201c\u201d" in text
                or "\\" in text
                or "\r" in text
            ):
                # an unpaired double quote, or one pysbd may pair differently (it skips
                # empty quotes, honours backslash escapes, splits lines at "\r" first):
                # pysbd's quote rules then pair quotes across sentences
                blocks = _irregular_quote_blocks(text)
                for a, b in blocks:
                    fills.append((a, b, _BLOCK * (b - a)))
                    doubts.append(a)
            for q in _DOUBLE_QUOTED.finditer(text):
                if blocks and any(a < q.end() and q.start() < b for a, b in blocks):
                    continue  # inside a block pysbd decides
                a, b = q.start() + 1, q.end() - 1  # inside the quotes
                inner = text[a:b]
                ends_with_mark = inner[-1:] in (".", "!", "?")
                if (ends_with_mark and len(inner) > 1 and inner[-2] in ".!?") or (
                    inner.rstrip()[-1:] in (".", "!", "?") and not ends_with_mark
                ):
                    fills.append((a, b, _HIDDEN * (b - a)))
                    doubts.append(q.start())  # "Wait..." / "Really?!" / '"DKP. " The'
                elif ends_with_mark:
                    # the closing quote stands in for the mark, so the mark run is seen
                    # as '"\0\0\0' + '.'; a quote is never the same length as its inside.
                    fills.append((a, b + 1, _HIDDEN * (b - a) + inner[-1]))
                else:
                    fills.append((a, b, _HIDDEN * (b - a)))
        return _filled(text, fills), doubts

    def _learn_sure(self, tokens: list[str]) -> bool:
        """Whether _line_cuts cuts after every token when spaces and a capital follow its
        single period (one space after a quote's mark, see _plain_quote_copy); the sure
        ones are remembered."""
        sure = self._sure_tokens
        if len(sure) > 200_000:  # bound memory on endless vocabularies
            sure.clear()
        for w in tokens:
            if w not in sure:
                if (w[:1] in ('"', "\u201c") and w.endswith(_HIDDEN)) or self._decide_boundary(w, False) is True:
                    sure.add(w)  # (a boundary whatever the capitalised word after it)
                else:
                    return False
        return True

    def _plain_spans(self, text: str) -> list[tuple[int, int]] | None | bool:
        """The common case without a loop per mark: plain characters, quotes that pair up,
        and every period either a sure boundary ("word. Capital" after a sure word), a
        decimal point or a line end. Returns _fast_spans's spans, None (the whole caption
        goes to pysbd), or _UNSETTLED when the detailed path must decide."""
        if _PLAIN_TEXT.fullmatch(text) is None:
            return _UNSETTLED
        if _LIST_ITEM_PERIOD.search(text) is not None:
            return None
        if "'" in text and _OPENING_APOSTROPHE.search(text) is not None:
            for q in _SINGLE_QUOTED.finditer(text):
                g = q.group()
                if "." in g or "!" in g or "?" in g:
                    return _UNSETTLED
        if '"' in text or "\u201c" in text or "\u201d" in text:
            scan = _plain_quote_copy(text)
            if scan is None:
                return _UNSETTLED
        else:
            scan = text
        if "!" in scan or "?" in scan:
            return _UNSETTLED
        cuts = [m.span(1) for m in _PLAIN_CUT.finditer(scan)]
        rest = scan.count(".") - len(cuts)
        lines = "\n" in scan
        if rest:
            if lines:
                rest -= len(_PLAIN_LINE_END.findall(scan))
            else:  # _PLAIN_LINE_END's one possible match: the last period
                tail = scan.rstrip(" ")
                rest -= tail[-1:] == "." and tail[-2:-1] != "."
            if rest:
                rest -= len(_PLAIN_DECIMAL.findall(scan))
                if rest:
                    return _UNSETTLED  # a period that is no sure boundary, decimal or line end
        if cuts:
            # the token before each cut's period: from the last space or line break
            if lines:
                tokens = [scan[max(scan.rfind(" ", 0, e - 1), scan.rfind("\n", 0, e - 1)) + 1 : e - 1] for e, _ in cuts]
            else:
                tokens = [scan[scan.rfind(" ", 0, e - 1) + 1 : e - 1] for e, _ in cuts]
            if not (self._sure_tokens.issuperset(tokens) or self._learn_sure(tokens)):
                return _UNSETTLED
        if lines:
            breaks = [m.span() for m in _PLAIN_BREAK.finditer(scan)]
            if " \n" in scan:  # a break starts at the spaces before it
                for i, (a, b) in enumerate(breaks):
                    while a and scan[a - 1] == " ":
                        a -= 1
                    breaks[i] = (a, b)
            cuts += breaks
            cuts.sort()
        flat = iter([0, *chain.from_iterable(cuts), len(text)])
        spans = list(zip(flat, flat))
        if text[0].isspace() or text[-1].isspace():
            # inner spans are tight (a period or a line's last character; a capital or a
            # line's first); the first and the last may hold the caption's outer whitespace
            last = _tight(text, *spans[-1])
            if last is None:
                spans.pop()
            else:
                spans[-1] = last
            if spans:
                first = _tight(text, *spans[0])
                if first is None:
                    spans.pop(0)
                else:
                    spans[0] = first
        return spans

    def _fast_spans(self, text: str) -> list[tuple[int, int]] | None:
        """Spans, with pysbd asked only about the stretches between sure boundaries that
        hold a doubtful mark; None when the whole caption must go to pysbd."""
        spans = self._plain_spans(text)
        return self._detailed_spans(text) if spans is _UNSETTLED else spans

    def _detailed_spans(self, text: str) -> list[tuple[int, int]] | None:
        """_fast_spans for any caption: a loop over the marks of each line."""
        odd: list[int] = []
        if (
            (_UNSAFE_ASCII.search(text) is not None)
            if text.isascii()
            else (_SAFE_TYPOGRAPHIC.fullmatch(text) is None and _SAFE_TEXT.fullmatch(text) is None)
        ):
            if _PAIRED_OR_LIST_CHAR.search(text):
                return None  # brackets, bullets, control characters: pysbd sees it all
            odd = [m.start() for m in _UNSAFE_CHAR.finditer(text)]  # "…", "|", ...: pysbd sees their stretch
        if (")" in text and _LIST_MARKER_CLOSE.search(text)) or _LIST_ITEM_PERIOD.search(text):
            return None  # pysbd numbers list items across the whole text
        copy = self._scan_copy(text)
        if copy is None:
            return None
        scan, doubts = copy
        doubts += odd
        cuts = [0]
        pos = 0
        for br in _PARAGRAPH_BREAK.finditer(scan) if ("\n" in scan or "\r" in scan) else ():
            self._line_cuts(scan, pos, br.start(), cuts, doubts)
            cuts.append(br.start())
            pos = br.end()
        self._line_cuts(scan, pos, len(scan), cuts, doubts)
        cuts.append(len(scan))
        doubts.sort()
        out = []
        d = 0
        for a, b in zip(cuts, cuts[1:]):
            if d < len(doubts) and doubts[d] < b:
                while d < len(doubts) and doubts[d] < b:
                    d += 1
                # a stretch between two sure boundaries holding a doubtful mark: pysbd
                # decides it (its rules look at the neighbouring words, not further).
                self.pysbd_stretches += 1
                # with the line break that follows it: pysbd treats the very end of its
                # input differently ("The 'Big.'" alone splits off the quote)
                c = b
                while c < len(text) and text[c].isspace():
                    c += 1
                out.extend((a + s, a + e) for s, e in self._pysbd.spans(text[a:c]))
                continue
            t = _tight(text, a, b)
            if t:
                out.append(t)
        return out

    def _easy_spans(self, text: str) -> list[tuple[int, int]] | None:
        """Spans when no part of the caption needs pysbd, else None (for benchmarks)."""
        before = self.pysbd_stretches
        spans = self._fast_spans(text)
        return spans if spans is not None and self.pysbd_stretches == before else None

    def spans(self, text: str) -> list[tuple[int, int]]:
        self.calls += 1
        if not text or text.isspace():
            return []
        spans = self._fast_spans(text)
        if spans is not None:
            return spans
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
