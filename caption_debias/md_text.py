"""Data as inert Markdown text: what a report.md quotes from a dataset (captions, keys, names,
phrases, reasons) renders as the same characters in any Markdown viewer, and never as markup:
no HTML element, no image a viewer would fetch, no link, no emphasis, no line break.

CommonMark lets any ASCII punctuation be escaped with a backslash; `<`, `>` and `&` become
entities instead (so neither raw HTML nor an autolink nor an entity reference survives).
"""

from __future__ import annotations

import re
from typing import Any

_BREAKS = re.compile(r"[\r\n\x0b\x0c\x85\u2028\u2029]+")
_PUNCT = re.compile(r"([\\`*_~\[\]!|#])")  # not ( ) { }: a link needs "](", and ] is escaped
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def text(value: Any) -> str:
    """`value` as Markdown inline text that shows exactly its characters (line breaks as spaces)."""
    flat = _BREAKS.sub(" ", str(value))
    flat = re.sub(r"[&<>]", lambda m: _ENTITIES[m.group()], flat)
    return _PUNCT.sub(r"\\\1", flat)


def code(value: Any) -> str:
    """`value` as a Markdown code span, shown verbatim (line breaks as spaces); a value holding a
    backtick, `<`, `>` or `&` as `text` instead, so no raw HTML is in the file even inside a span."""
    flat = _BREAKS.sub(" ", str(value))
    if any(c in flat for c in "`<>&"):
        return text(flat)
    return f"`{flat}`"
