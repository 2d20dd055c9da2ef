"""Caption variants built from a caption's sentences (the paper's bias probes).

Every variant joins its sentences with single spaces:
  keep      all sentences as they are
  remove    first (summary) sentence dropped
  move      first sentence moved to the 4th place (to the end when there are < 4)
  swap2     first two sentences swapped, the rest dropped
  first2    first two sentences
  first     first sentence only
  filler:N  N copies of "This is a photo." before the first two sentences (paper's filler probe)
A caption with too few sentences gives what is left (a 1-sentence caption under `remove`
gives ""); `short_counts` reports how many captions that happened to.
"""

from __future__ import annotations

from typing import Sequence

from caption_debias.errors import UserError

FILLER = "This is a photo."
BASE_VARIANTS = ("keep", "remove", "move", "swap2", "first2", "first")
DEFAULT_VARIANTS = ("keep", "remove", "move")
# Fewest sentences each variant needs to be what its name says.
_NEEDS = {"keep": 1, "remove": 2, "move": 2, "swap2": 2, "first2": 2, "first": 1, "filler": 2}


def parse_variant(name: str) -> tuple[str, int]:
    """'filler:3' -> ('filler', 3); 'keep' -> ('keep', 0). UserError on anything else."""
    name = name.strip()
    if name in BASE_VARIANTS:
        return name, 0
    if name.startswith("filler:"):
        count = name.split(":", 1)[1]
        if count.isdigit():
            return "filler", int(count)
    raise UserError(f"unknown caption variant {name!r} (use {', '.join(BASE_VARIANTS)} or filler:N)")


def parse_variants(text: str | Sequence[str]) -> list[str]:
    """Comma-separated list (or a sequence) of variant names, validated, duplicates dropped."""
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    out: list[str] = []
    for name in names:
        if not name:
            continue
        parse_variant(name)
        if name not in out:
            out.append(name)
    if not out:
        raise UserError("no caption variants given")
    return out


def make_variant(sentences: Sequence[str], variant: str) -> str:
    """The caption text of one variant, sentences joined with single spaces."""
    kind, n = parse_variant(variant)
    s = [x.strip() for x in sentences if x and x.strip()]
    if kind == "keep":
        parts = s
    elif kind == "remove":
        parts = s[1:]
    elif kind == "move":
        parts = s[1:4] + s[:1] + s[4:]
    elif kind == "swap2":
        parts = s[1:2] + s[:1]
    elif kind == "first2":
        parts = s[:2]
    elif kind == "first":
        parts = s[:1]
    else:  # filler
        parts = [FILLER] * n + s[:2]
    return " ".join(parts)


def too_short(sentences: Sequence[str], variant: str) -> bool:
    """True when the caption has fewer sentences than the variant needs (it then degrades)."""
    kind, _ = parse_variant(variant)
    return sum(1 for x in sentences if x and x.strip()) < _NEEDS[kind]


def short_counts(captions: Sequence[Sequence[str]], variants: Sequence[str]) -> dict[str, int]:
    return {v: sum(too_short(c, v) for c in captions) for v in variants}
