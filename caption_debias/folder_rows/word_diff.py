"""Two captions side by side, word by word: what one has that the other lacks (near-duplicates).

difflib's SequenceMatcher (the standard library's, no dependency; captions are a few hundred words,
far below where its quadratic worst case matters) over the lower-cased words, without its junk
heuristic (a caption's common words are not junk); the words are shown as written.
"""

from __future__ import annotations

import difflib
from typing import Any


def word_diff(left: str, right: str) -> dict[str, Any]:
    """{left: [[word, "same"|"removed"]...], right: [[word, "same"|"added"]...], same_share}: the left
    caption's words the right lacks, and the right's words the left lacks."""
    a, b = (left or "").split(), (right or "").split()
    matcher = difflib.SequenceMatcher(None, [w.lower() for w in a], [w.lower() for w in b], autojunk=False)
    out_a: list[list[str]] = []
    out_b: list[list[str]] = []
    for op, i0, i1, j0, j1 in matcher.get_opcodes():
        same = op == "equal"
        out_a += [[w, "same" if same else "removed"] for w in a[i0:i1]]
        out_b += [[w, "same" if same else "added"] for w in b[j0:j1]]
    return {"left": out_a, "right": out_b, "same_share": round(matcher.ratio(), 4)}
