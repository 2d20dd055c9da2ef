"""The fast segmenter's plain path: most captions settled by a few regex passes, no loop per mark.

It takes captions of plain characters whose double quotes pair up and whose every period
is a sure boundary ("word. Capital" after a word pysbd always splits after), a decimal
point or a line end; anything else is left to the detailed scan (scan.py). Both give the
same spans (tests/test_text_segment.py).
"""

from __future__ import annotations

import re
from itertools import chain

from caption_debias.text.segment.base import UNSETTLED, WHOLE_TO_PYSBD, FastSplit, Verdict, tight
from caption_debias.text.segment.pysbd_rules import LIST_ITEM_PERIOD, has_letter_list
from caption_debias.text.segment.scan import DOUBLE_QUOTED, HIDDEN, SINGLE_QUOTED, Boundaries, has_mark

# Characters it accepts: ASCII letters, digits, spaces, line breaks, common punctuation,
# curly double quotes and apostrophes, dashes, Latin letters with accents (a capital one
# after a period is no _CUT, so that period is left to the detailed scan).
_PLAIN_TEXT = re.compile(
    r"[A-Za-z0-9 \n,;:'\-/%&+$#*=@.!?\"\u201c\u201d\u2019\u2013\u2014\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f]*"
)
# An opening single quote in plain text, or more (after an accented letter): then
# SINGLE_QUOTED is searched as well, which finds no quote there either
_OPENING_APOSTROPHE = re.compile(r"'(?<![A-Za-z0-9]')")
# Each pattern starts with the period itself, so that the search jumps from period to period.
# A sure boundary if the word before it is sure: spaces, then a capital. group(1)'s
# span is (sentence end, next sentence start).
_CUT = re.compile(r"\.( +)(?=[A-Z])")
_DECIMAL = re.compile(r"\.(?=\d)(?<=\d\.)")  # "3.5": no boundary
_LINE_END = re.compile(r"\.(?= *(?:\n|\Z))(?<!\.\.)")  # one period at a line end: no boundary of its own
_BREAK = re.compile(r"\n\s*")
# DOUBLE_QUOTED's two halves: a search for a literal first character jumps ahead, one for
# either of two is several times slower (captions with both kinds use DOUBLE_QUOTED itself).
_STRAIGHT_QUOTED = re.compile(r"\"[^\"\n]*\"")
_CURLY_QUOTED = re.compile(r"\u201c[^\u201d\u201c\n]*\u201d")


def _quote_copy(text: str) -> str | None:
    """scan.scan_copy's copy for plain text whose double quotes all pair up (no quote inside
    a pair), built from slices, or None when the detailed scan has to decide (a doubt, an
    irregular quote, or a case outside those below).

    When no pair holds a mark, the text itself: hiding a pair changes no verdict then (the
    only marks are outside the pairs, and a token reaching into a pair holds its closing
    quote either way, as its last character or not). Otherwise every pair is hidden as
    scan_copy does, with one change: a mark that ends a quote and is followed by neither
    one space and a capital nor the end of a line is hidden too (the scan skips it when
    the token before it starts with the opening quote, which is required here)."""
    if '""' in text or "\u201c\u201d" in text:
        return None
    curly = "\u201c" in text or "\u201d" in text
    pattern = (DOUBLE_QUOTED if '"' in text else _CURLY_QUOTED) if curly else _STRAIGHT_QUOTED
    pairs = pattern.findall(text) if pattern is not DOUBLE_QUOTED else [m.group() for m in pattern.finditer(text)]
    if text.count('"') + (text.count("\u201c") + text.count("\u201d") if curly else 0) != 2 * len(pairs):
        return None  # a quote outside the pairs (or inside one): pysbd may pair them otherwise
    if not has_mark("".join(pairs)):
        return text
    n = len(text)
    parts: list[str] = []
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
                close = last  # a line end, or a cut _CUT sees
            elif k > j and text[k].isupper():
                return None  # '"Stop."  The': a doubt
            elif a == 1 or text[a - 2] in " \n":
                close = HIDDEN  # '"Go!" and left', '"Stop.",': no boundary, no doubt
            else:
                return None
        elif inner.rstrip()[-1:] in (".", "!", "?"):
            return None
        else:
            close = text[b]
        parts += (text[pos:a], HIDDEN * (b - a), close)
        pos = b + 1
    parts.append(text[pos:])
    return "".join(parts)


def _periods_accounted_for(scan: str, n_cuts: int, lines: bool) -> bool:
    """Whether every period of `scan` that is no cut is a line end or a decimal point."""
    rest = scan.count(".") - n_cuts
    if rest:
        if lines:
            rest -= len(_LINE_END.findall(scan))
        else:  # _LINE_END's one possible match: the last period
            tail = scan.rstrip(" ")
            rest -= tail[-1:] == "." and tail[-2:-1] != "."
        if rest:
            rest -= len(_DECIMAL.findall(scan))
    return not rest


def _tokens_before(scan: str, cuts: list[tuple[int, int]], lines: bool) -> list[str]:
    """The token before each cut's period: from the last space or line break."""
    if lines:
        return [scan[max(scan.rfind(" ", 0, e - 1), scan.rfind("\n", 0, e - 1)) + 1 : e - 1] for e, _ in cuts]
    return [scan[scan.rfind(" ", 0, e - 1) + 1 : e - 1] for e, _ in cuts]


def _line_breaks(scan: str) -> list[tuple[int, int]]:
    """Each line break as a cut, starting at the spaces before it."""
    breaks = [m.span() for m in _BREAK.finditer(scan)]
    if " \n" in scan:
        for i, (a, b) in enumerate(breaks):
            while a and scan[a - 1] == " ":
                a -= 1
            breaks[i] = (a, b)
    return breaks


def _spans_between(text: str, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans between cuts (end of one sentence, start of the next). Inner spans are
    tight (a period or a line's last character; a capital or a line's first); the first
    and the last may hold the caption's outer whitespace."""
    flat = iter([0, *chain.from_iterable(cuts), len(text)])
    spans = list(zip(flat, flat))
    if text[0].isspace() or text[-1].isspace():
        last = tight(text, *spans[-1])
        if last is None:
            spans.pop()
        else:
            spans[-1] = last
        if spans:
            first = tight(text, *spans[0])
            if first is None:
                spans.pop(0)
            else:
                spans[0] = first
    return spans


class PlainPath:
    def __init__(self, boundaries: Boundaries):
        self._boundaries = boundaries

    def split(self, text: str) -> FastSplit:
        """SETTLED with the spans, WHOLE_TO_PYSBD (list items), or UNSETTLED."""
        if _PLAIN_TEXT.fullmatch(text) is None:
            return UNSETTLED
        if LIST_ITEM_PERIOD.search(text) is not None or has_letter_list(text):  # (no parentheses in plain text)
            return WHOLE_TO_PYSBD
        if "'" in text and _OPENING_APOSTROPHE.search(text) is not None:
            for q in SINGLE_QUOTED.finditer(text):
                if has_mark(q.group()):
                    return UNSETTLED
        if '"' in text or "\u201c" in text or "\u201d" in text:
            scan = _quote_copy(text)
            if scan is None:
                return UNSETTLED
        else:
            scan = text
        if "!" in scan or "?" in scan:
            return UNSETTLED
        cuts = [m.span(1) for m in _CUT.finditer(scan)]
        lines = "\n" in scan
        if not _periods_accounted_for(scan, len(cuts), lines):
            return UNSETTLED  # a period that is no sure boundary, decimal or line end
        if cuts and not self._boundaries.all_sure(_tokens_before(scan, cuts, lines)):
            return UNSETTLED
        if lines:
            cuts += _line_breaks(scan)
            cuts.sort()
        return FastSplit(Verdict.SETTLED, _spans_between(text, cuts))
