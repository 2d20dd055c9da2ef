"""The fast segmenter's detailed scan: any caption, mark by mark, line by line.

Quoted and bracketed text is hidden in a same-length copy of the caption (pysbd never
splits inside a pair), then every run of [.!?] on each line is either a sure boundary
(pysbd_rules.sure_boundary), a sure non-boundary (a decimal point, a line end) or a doubt.
The stretch between the two sure boundaries around a doubt goes to pysbd, whose rules
look at the neighbouring words and no further.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import regex

from caption_debias.text.segment.base import WHOLE_TO_PYSBD, FastSplit, Verdict, tight
from caption_debias.text.segment.pysbd_rules import (
    CAPITALISED,
    PAIRED_OR_LIST_CHAR,
    UNSAFE_CHAR,
    has_list_items,
    has_unsafe_char,
    quote_patterns,
    sure_boundary,
)

HIDDEN = "\x00"  # fills quoted text in the scanned copy; never in safe text
_BLOCK = "\x01"  # fills a stretch around unpaired quotes (quotes and line breaks included); never in safe text
# Double-quoted stretches. pysbd never splits inside them; a stretch ending in one mark
# ('reads "Stop." The') ends a sentence when a capital follows, as a word would.
DOUBLE_QUOTED = re.compile(r"\"([^\"\n]*)\"|\u201c([^\u201d\u201c\n]*)\u201d")
_DOUBLE_QUOTE_CHAR = re.compile(r"[\"\u201c\u201d]")
# Single-quoted stretches (not apostrophes); pysbd's rules there are subtler: one holding
# a mark is left to pysbd.
SINGLE_QUOTED = regex.compile(r"(?<![\p{L}\p{N}])['\u2018][^'\u2019\n]*['\u2019](?![\p{L}\p{N}])")
# Every run of sentence marks, with the spaces after it (the token before it is found with
# rfind: a lazy "\S*?" prefix in the pattern is much slower).
_MARK = re.compile(r"([.!?]+)[ \xa0]*")
_PARAGRAPH_BREAK = regex.compile(r"[ \xa0]*[\r\n]\s*")
_LINE = re.compile(r"[^\r\n]+")
_PAREN_GROUP = re.compile(r"\([^()]*\)")
_LIMIT = 200_000  # remembered answers per cache; cleared when full (bounds memory on endless vocabularies)


def has_mark(s: str) -> bool:
    return "." in s or "!" in s or "?" in s


def closes_hidden_quote(token: str) -> bool:
    """A token that opens a double quote and ends inside it ('"Stop.' seen as '"\\0\\0\\0\\0'):
    its mark ends the quote, which splits before a capital as a word would."""
    return token[:1] in ('"', "\u201c") and token.endswith(HIDDEN)


class Boundaries:
    """pysbd_rules.sure_boundary's answers, remembered: by (word, next two characters) for
    the scan's marks, and the words after which "word. Capital" splits whatever the capital
    (for the plain path)."""

    def __init__(self):
        self.by_context: dict[tuple[str, str], bool | None] = {}
        self.sure_words: set[str] = set()

    def after(self, word: str, next_text: str) -> bool | None:
        """True: split after `word` + one mark before `next_text`; None: not sure."""
        key = (word, next_text)  # the next two characters themselves, so a hit needs no regex
        hit = self.by_context.get(key, False)  # sure_boundary never answers False: False is "not asked yet"
        if hit is False:
            if len(self.by_context) > _LIMIT:
                self.by_context.clear()
            hit = self.by_context[key] = sure_boundary(word, CAPITALISED.match(next_text) is not None)
        return hit

    def all_sure(self, tokens: list[str]) -> bool:
        """Whether the scan cuts after every token when spaces and a capital follow its single
        period (one space after a quote's mark); the sure ones are remembered."""
        sure = self.sure_words
        if sure.issuperset(tokens):
            return True
        if len(sure) > _LIMIT:
            sure.clear()
        for w in tokens:
            if w not in sure:
                if closes_hidden_quote(w) or sure_boundary(w, False) is True:
                    sure.add(w)  # (a boundary whatever the capitalised word after it)
                else:
                    return False
        return True


def _has_opening_single_quote(text: str) -> bool:
    """A ' or \u2018 not preceded by a letter or digit (apostrophes are, and are common)."""
    for ch in ("'", "\u2018"):
        i = text.find(ch)
        while i >= 0:
            if i == 0 or not text[i - 1].isalnum():
                return True
            i = text.find(ch, i + 1)
    return False


def _parentheses_are_balanced(text: str) -> bool:
    """Every parenthesis in an unnested pair."""
    rest = _PAREN_GROUP.sub("", text)
    return "(" not in rest and ")" not in rest


def _irregular_quote_blocks(text: str) -> list[tuple[int, int]]:
    """Disjoint [start, end) blocks holding every double quote that is not in a pair as
    DOUBLE_QUOTED finds them, every stretch pysbd protects that is not such a pair, and
    every pair or protected stretch overlapping those. Each block goes to pysbd within the
    stretch between the sure boundaries around it, so pysbd sees all quotes it pairs with
    each other together (quotes outside the blocks are in pairs on which both agree)."""
    pairs = [q.span() for q in DOUBLE_QUOTED.finditer(text)]
    paired = set(pairs)
    straight, curly = quote_patterns()
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


def _filled(text: str, fills: list[tuple[int, int, str]]) -> str:
    """`text` with each text[a:b] replaced by its same-length fill, later fills over earlier
    ones: joined from slices when the fills do not overlap (the rule), else char by char."""
    if not fills:
        return text
    ordered = sorted(fills)
    if all(x[1] <= y[0] for x, y in zip(ordered, ordered[1:])):
        parts: list[str] = []
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


def scan_copy(text: str) -> tuple[str, list[int]]:
    """`text` with quoted and bracketed text hidden (same length), and the starts of hidden
    stretches pysbd must look at. Parentheses must be balanced (checked by the caller)."""
    doubts: list[int] = []
    has_double = '"' in text or "\u201c" in text or "\u201d" in text
    has_paren = "(" in text or ")" in text
    has_single = _has_opening_single_quote(text)
    if not (has_double or has_paren or has_single):
        return text, doubts
    fills: list[tuple[int, int, str]] = []  # (start, end, replacement of text[start:end]), in order

    if has_paren:
        for g in _PAREN_GROUP.finditer(text):
            if has_mark(g.group()):  # pysbd never splits inside: it decides
                a, b = g.start() + 1, g.end() - 1
                fills.append((a, b, HIDDEN * (b - a)))
                doubts.append(g.start())
    if has_single:
        for q in SINGLE_QUOTED.finditer(text):
            if has_mark(q.group()):
                a, b = q.start() + 1, q.end() - 1
                fills.append((a, b, HIDDEN * (b - a)))
                doubts.append(q.start())
    if has_double:
        blocks: list[tuple[int, int]] = []
        if (
            _DOUBLE_QUOTE_CHAR.search(DOUBLE_QUOTED.sub("", text)) is not None
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
        for q in DOUBLE_QUOTED.finditer(text):
            if blocks and any(a < q.end() and q.start() < b for a, b in blocks):
                continue  # inside a block pysbd decides
            a, b = q.start() + 1, q.end() - 1  # inside the quotes
            inner = text[a:b]
            ends_with_mark = inner[-1:] in (".", "!", "?")
            if (ends_with_mark and len(inner) > 1 and inner[-2] in ".!?") or (
                inner.rstrip()[-1:] in (".", "!", "?") and not ends_with_mark
            ):
                fills.append((a, b, HIDDEN * (b - a)))
                doubts.append(q.start())  # "Wait..." / "Really?!" / '"DKP. " The'
            elif ends_with_mark:
                # the closing quote stands in for the mark, so the mark run is seen
                # as '"\0\0\0' + '.'; a quote is never the same length as its inside.
                fills.append((a, b + 1, HIDDEN * (b - a) + inner[-1]))
            else:
                fills.append((a, b, HIDDEN * (b - a)))
    return _filled(text, fills), doubts


class DetailedScan:
    """Splits any caption: sure boundaries itself, each stretch holding a doubt by pysbd
    (`ask_pysbd`, given the stretch with the line break after it, since pysbd treats the
    very end of its input differently: "The 'Big.'" alone splits off the quote)."""

    def __init__(self, boundaries: Boundaries, ask_pysbd: Callable[[str], list[tuple[int, int]]]):
        self._boundaries = boundaries
        self._ask_pysbd = ask_pysbd

    def split(self, text: str) -> FastSplit:
        odd: list[int] = []
        if has_unsafe_char(text):
            if PAIRED_OR_LIST_CHAR.search(text):
                return WHOLE_TO_PYSBD  # brackets, bullets, control characters
            odd = [m.start() for m in UNSAFE_CHAR.finditer(text)]  # "…", "|", ...: pysbd sees their stretch
        if has_list_items(text) or (("(" in text or ")" in text) and not _parentheses_are_balanced(text)):
            return WHOLE_TO_PYSBD
        scan, doubts = scan_copy(text)
        doubts += odd
        cuts = [0]
        pos = 0
        for br in _PARAGRAPH_BREAK.finditer(scan) if ("\n" in scan or "\r" in scan) else ():
            self._line_cuts(scan, pos, br.start(), cuts, doubts)
            cuts.append(br.start())
            pos = br.end()
        self._line_cuts(scan, pos, len(scan), cuts, doubts)
        cuts.append(len(scan))
        return FastSplit(Verdict.SETTLED, self._assemble(text, cuts, sorted(doubts)))

    def _assemble(self, text: str, cuts: list[int], doubts: list[int]) -> list[tuple[int, int]]:
        """Spans between the cuts; pysbd's for each stretch holding a doubt."""
        out: list[tuple[int, int]] = []
        d = 0
        for a, b in zip(cuts, cuts[1:]):
            if d < len(doubts) and doubts[d] < b:
                while d < len(doubts) and doubts[d] < b:
                    d += 1
                c = b
                while c < len(text) and text[c].isspace():
                    c += 1
                out.extend((a + s, a + e) for s, e in self._ask_pysbd(text[a:c]))
                continue
            t = tight(text, a, b)
            if t:
                out.append(t)
        return out

    def _line_cuts(self, scan: str, start: int, stop: int, cuts: list[int], doubts: list[int]) -> None:
        """Append the sure sentence ends inside scan[start:stop] (one line) to `cuts`, and
        the positions of marks the fast path cannot decide to `doubts`."""
        nbsp = "\xa0" in scan  # rare: skip its rfind otherwise
        by_context, after = self._boundaries.by_context, self._boundaries.after
        for m in _MARK.finditer(scan, start, stop):  # endpos keeps the spaces inside the line
            m_start, nxt = m.span()
            m_end = m.end(1)
            if nxt >= stop:
                if m_end - m_start != 1:
                    doubts.append(m_start)  # "sun.." at a line end: pysbd splits it oddly
                continue
            # the token from the last space or the line's start
            word = scan[
                max(start - 1, scan.rfind(" ", start, m_start), scan.rfind("\xa0", start, m_start) if nbsp else -1)
                + 1 : m_start
            ]
            if closes_hidden_quote(word):
                if nxt > m_end and scan[nxt].isupper():
                    if nxt - m_end == 1 and scan[m_end] == " " and "A" <= scan[nxt] <= "Z":
                        cuts.append(m_end)
                    else:  # 'reads "X."  In', '"Hi." Élan': pysbd keeps them together
                        doubts.append(m_start)
                continue  # '"Go!" and left': no boundary
            if nxt == m_end:  # no space
                if m_end - m_start == 1 and scan[m_start] == "." and word[-1:].isdigit() and scan[nxt].isdigit():
                    continue  # decimal "3.5"
                doubts.append(m_start)
            elif (
                m_end - m_start != 1
                or not scan[nxt].isupper()
                or not (by_context.get((word, scan[nxt : nxt + 2])) or after(word, scan[nxt : nxt + 2]))
            ):
                doubts.append(m_start)
            else:
                cuts.append(m_end)
