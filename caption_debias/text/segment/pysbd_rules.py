"""What the fast segmenter knows of pysbd's English rules (pysbd 0.3.4), in one place.

Every fact here is read from pysbd's own lists and patterns or was probed against it;
tests/test_text_segment.py re-checks them against the installed pysbd. The scanners
(plain.py, scan.py) only apply them.
"""

from __future__ import annotations

import re
from functools import lru_cache

import regex


@lru_cache(maxsize=1)
def abbreviations() -> tuple[frozenset[str], frozenset[str]]:
    """(all abbreviations pysbd knows, those it never ends a sentence after).

    Probing pysbd showed: after an ordinary abbreviation ("co.", "man.", "etc.") it splits
    before a capitalised word (except "I"), as after any word; after a prepositive one
    ("Dr.", "St.", "Mt."), a dotted one ("e.g.", "U.S.") and "fig.", "ph.", "v.", "vs." it
    never does.
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
def abbreviation_pattern() -> re.Pattern:
    """Tokens whose period pysbd's AbbreviationReplacer can protect: it finds each entry of
    its three lists with r"(?:^|\\s|\r|\n)" + entry (unescaped, IGNORECASE: "u.s" also
    matches "UPS") and then replaces the period after the matched text wherever it follows
    a space; an all-caps or numeric token matching none of them is never touched there."""
    from pysbd.lang.english import English

    ab = English.Abbreviation
    entries = {a.strip() for a in (*ab.ABBREVIATIONS, *ab.PREPOSITIVE_ABBREVIATIONS, *ab.NUMBER_ABBREVIATIONS)}
    return re.compile("|".join(f"(?:{a})" for a in sorted(entries)), re.IGNORECASE)


@lru_cache(maxsize=1)
def quote_patterns() -> tuple[re.Pattern, re.Pattern]:
    """pysbd's own patterns for the double-quoted stretches whose marks it protects
    (straight quotes pair up in order, a \u201c with the next \u201d)."""
    from pysbd.between_punctuation import BetweenPunctuation as bp

    return re.compile(bp.BETWEEN_DOUBLE_QUOTES_REGEX_2), re.compile(bp.BETWEEN_QUOTE_SLANTED_REGEX_2)


# --- characters --------------------------------------------------------------------------
# Characters with no sentence-splitting rule of their own in pysbd: letters, digits and
# ordinary punctuation. Anything else (brackets, ellipsis "\u2026", tabs, bullets, CJK
# marks, control characters, ...) is left to pysbd.
_SAFE_ASCII = r"A-Za-z0-9 \n\r,;:'\-/%&+$#*=@.!?()\""
_SAFE_CHARS = r"\p{L}\p{N}\p{M} \xa0\n\r,;:'\-/%&+$#*=@.!?()\u2018\u2019\u201c\u201d\"\u2013\u2014\u00b0\u00d7\u00bc-\u00be\u00b2\u00b3"
_SAFE_TEXT = regex.compile(rf"[{_SAFE_CHARS}]*")
UNSAFE_CHAR = regex.compile(rf"[^{_SAFE_CHARS}]")
# the same test on ASCII text, and on ASCII plus curly quotes, dashes and no-break spaces
# (the common non-ASCII captions), with the stdlib engine, several times faster than \p classes
_UNSAFE_ASCII = re.compile(rf"[^{_SAFE_ASCII}]")
_SAFE_TYPOGRAPHIC = re.compile(rf"[{_SAFE_ASCII}\u2018\u2019\u201c\u201d\u2013\u2014\xa0]*")
# Of the others, those that pair up across sentences or start list items: pysbd must see
# the whole caption.
PAIRED_OR_LIST_CHAR = re.compile(r"[\[\]{}\u2022\u2023\u25e6\u2043\u2219\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def has_unsafe_char(text: str) -> bool:
    """Whether `text` holds a character outside _SAFE_CHARS."""
    if text.isascii():
        return _UNSAFE_ASCII.search(text) is not None
    return _SAFE_TYPOGRAPHIC.fullmatch(text) is None and _SAFE_TEXT.fullmatch(text) is None


# --- list items: pysbd numbers them across the whole text ---------------------------------
@lru_cache(maxsize=1)
def _list_rules() -> tuple[re.Pattern, re.Pattern, tuple[str, ...], tuple[str, ...]]:
    """pysbd's searches for list items before a ")" ("a) item (b) item", "iv) item", "1) item
    2) item"), as its ListItemReplacer runs them (case-sensitive), and the two orders its
    lettered items are kept and compared in (the alphabet, the roman numerals)."""
    from pysbd.lists_item_replacer import ListItemReplacer as li

    return (
        re.compile(li.ALPHABETICAL_LIST_WITH_PARENS),
        re.compile(li.NUMBERED_LIST_PARENS_REGEX),
        tuple(li.LATIN_NUMERALS),
        tuple(li.ROMAN_NUMERALS),
    )


def _neighbours(items: list[str]) -> bool:
    """Whether two of pysbd's lettered items (of a whole text) are neighbours in one of its
    orders. ListItemReplacer.iterate_alphabet_array changes a text only when two items it
    compares are (each with the next, and the last with the first), and the items of any
    stretch of a text that starts at a space are a run of the text's own, so without
    neighbours neither the text nor any such stretch of it is changed."""
    _, _, latin, roman = _list_rules()
    for order in (latin, roman):
        found = {order.index(x) for x in items if x in order}  # index: its first place, as pysbd's
        if any(i + 1 in found for i in found):
            return True
    return False


# A ")" after a lower-case letter or a digit: where any of those items ends (the search
# jumps from parenthesis to parenthesis).
_ITEM_CLOSE = re.compile(r"\)(?<=[a-z\d]\))")


def has_paren_list(text: str) -> bool:
    """Whether pysbd's list rules for parentheses may act: two lettered items that are
    neighbours (_neighbours), or two numbered ones ("1) ... 2)"; neighbours or not). One
    item ("(would be)", "c. AD)") or several that are not neighbours is no list: the caption
    is scanned like any other."""
    if ")" not in text or _ITEM_CLOSE.search(text) is None:
        return False
    letters, numbers, _, _ = _list_rules()
    return _neighbours(letters.findall(text)) or len(numbers.findall(text)) >= 2


# "1. item", "iv. item": the period of a whitespace-delimited such token, followed by
# whitespace (re's \s and \S are str.isspace here); starts with the period so that the
# search jumps from period to period (tests/test_text_segment.py holds the plain definition).
LIST_ITEM_PERIOD = re.compile(
    r"\.(?=\s)(?:(?<=(?<!\S)\d\.)|(?<=(?<!\S)\d\d\.)"
    r"|(?<=(?<!\S)[ivxIVX]{2}\.)|(?<=(?<!\S)[ivxIVX]{3}\.)|(?<=(?<!\S)[ivxIVX]{4}\.))"
)
# pysbd's lettered lists ("a. item b. item"): its findall of ALPHABETICAL_LIST_WITH_PERIODS,
# a lower-case letter after whitespace (or at the start) and before a period, whatever
# follows the period ("e.g." counts). Items change the text only when two of them are
# neighbours (_neighbours), so one such letter, letters apart ("c. AD ... c. BC", "e.g.
# ... i.e."), or any number of capitals ("V. On", "M. Young") is no list: each is a doubt
# like any other. The pattern matches the period after the letter, so that the search
# jumps from period to period.
LETTER_ITEM = re.compile(r"\.(?<=(?<!\S)[a-z]\.)")


def has_letter_list(text: str) -> bool:
    """Whether pysbd's lettered-list rule may act: two lower-case letter items that are neighbours."""
    found = LETTER_ITEM.search(text)
    if found is None or LETTER_ITEM.search(text, found.end()) is None:
        return False
    return _neighbours([text[m.start() - 1] for m in LETTER_ITEM.finditer(text)])


def has_list_items(text: str) -> bool:
    return has_paren_list(text) or LIST_ITEM_PERIOD.search(text) is not None or has_letter_list(text)


# --- "TOKEN. Capital": when pysbd always splits ----------------------------------------------
# An all-caps ASCII word or a token of capitals and digits ("BMW", "SUV", "501", "W188"),
# not a number of one or two digits (pysbd's list items "12. ", its start-of-line rules).
_CAPS_OR_NUMBER = re.compile(r"(?!\d{1,2}\Z)[A-Z0-9]{2,}")
# A plain word: letters, possibly joined by hyphens or apostrophes ("t-shirt", "woman's").
_PLAIN_WORD = regex.compile(r"\p{L}+(?:['\u2019\-]\p{L}+)*")
_WORD_PART = regex.compile(r"['\u2019\-]")
_TIME = regex.compile(r"\d{1,2}:\d{2}")
_QUOTE_END = regex.compile(r".*[\"\u201d]")
CAPITALISED = regex.compile(r"\p{Lu}\p{Ll}")


def sure_boundary(word: str, capitalised_next: bool) -> bool | None:
    """True when pysbd ends a sentence after `word` + one period + spaces + a capital
    (`capitalised_next`: the next word is capitalised, "The" rather than "BMW"); None: not sure."""
    if _QUOTE_END.fullmatch(word) or _TIME.fullmatch(word):
        return True
    if _CAPS_OR_NUMBER.fullmatch(word) is not None and abbreviation_pattern().fullmatch(word) is None:
        # pysbd keeps such a period only through rules that need something this
        # "TOKEN. Capital" lacks: a listed abbreviation (excluded above), a single capital
        # (SingleLetterAbbreviationRules), dotted letters (MULTI_PERIOD_ABBREVIATION_REGEX),
        # a digit or non-space after the period (Numbers.PeriodBeforeNumberRule,
        # NumberAfterPeriodBeforeLetterRule, NUMBERED_REFERENCE_REGEX), a one- or two-digit
        # number (list items, Start/NewLine number rules). It splits, before "I" too.
        return True
    if len(word) < 2 or word.isupper() or _PLAIN_WORD.fullmatch(word) is None:
        return None
    every, never = abbreviations()
    for part in _WORD_PART.split(word):
        p = part.lower()
        if p in never:
            return None
        if p in every and not capitalised_next:
            return None
    return True
