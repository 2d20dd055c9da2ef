"""JSON as the page reads it, from the API and inside the static snapshot: `dumps`.

Strict JSON whatever a caption, key, path, reason or score holds: a NaN or infinite float (which
Python writes as the bare word NaN, which no JSON parser reads) becomes the string "NaN",
"Infinity" or "-Infinity"; only ASCII is written (U+2028, U+2029 and lone surrogates from a
removed.jsonl line escaped, never an encoding error); and no `<`, `>` or `&`, so the text is
inert inside an HTML <script> element (no `</script>`, and no `<!--`, which there swallows the
rest of the page).
"""

from __future__ import annotations

import json
import math
from typing import Any

_NONFINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def plain(value: Any) -> Any:
    """`value` with every non-finite float replaced by its name (JSON has no NaN or infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else _NONFINITE[value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def dumps(value: Any) -> str:
    try:  # the common case, no non-finite float: json's C encoder alone (a map's 100k points are 600k values)
        text = json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(plain(value), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
