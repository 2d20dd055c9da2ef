"""What a page asks for: `Query` (which rows, filters, sort, the slice) and its HTTP form.

`parse_query` reads the page's URL parameters into a Query and refuses what is not one (a
negative or huge offset, a number that is not one) with a ValueError the app answers as 400.
New filters are a field here, a parameter in `parse_query` and a clause in index.RowIndex.filters
(the sentence signals are index columns: folder_rows/sentence_signals.py; the map's box is `box`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PAGE_MAX = 200
MAX_OFFSET = 1 << 40  # beyond any folder's rows: larger is a malformed request, not an empty page


@dataclass
class Query:
    """One page request: which rows (kept, or removed of a reason), filters, sort and the slice."""

    view: str = "kept"  # kept | removed
    reason: str | None = None  # removed rows of this reason (None: all reasons)
    sources: tuple[str, ...] = ()
    folder: int | None = None  # rows of one folder (its index in the view's folder list)
    text: str = ""  # in the caption or the key, any case
    regex: bool = False  # `text` is a regular expression (Rust's regex syntax, linear time)
    where: str = ""  # a SQL expression over the index's columns (polars' sql_expr): a filter, never a statement
    tag: str = ""  # rows the tags file (view --tags) gives this tag
    tagged: tuple[str, ...] | None = None  # their keys, filled in by the app from the tags file (not in the URL)
    tag_version: int = 0  # the tags file's change count: a selection made before a change is not reused
    ranges: tuple[tuple[str, float | None, float | None], ...] = ()
    sort: str | None = None
    descending: bool = False
    box: tuple[float, float, float, float] | None = None  # x0, y0, x1, y1 on the map (view/embedding_map.py)
    lasso: tuple[tuple[float, float], ...] | None = None  # a polygon on the map: its vertices in map coordinates
    map_by: str = "image"  # the map the box or lasso was drawn on: image or caption (embedding_map.COLUMNS)
    offset: int = 0
    limit: int = 48

    def selection(self) -> tuple:
        """Everything but the slice: pages of one selection share its filtered, sorted index."""
        return (
            self.view,
            self.reason,
            self.sources,
            self.folder,
            self.text if self.regex else self.text.lower(),
            self.regex,
            self.where,
            self.tag,
            self.tag_version,
            self.ranges,
            self.sort,
            self.descending,
            self.box,
            self.lasso,
            self.map_by,
        )

    @property
    def plain(self) -> bool:
        """Kept rows in file order, unfiltered: served from the row groups without the index."""
        filtered = (
            self.sources
            or self.folder is not None
            or self.text
            or self.where
            or self.tag
            or self.ranges
            or self.sort
            or self.box
            or self.lasso
        )
        return self.view == "kept" and not filtered


def count(value: str | None, name: str, default: int, upper: int) -> int:
    """A whole number in 0..upper from a URL parameter (ValueError otherwise: the app's 400)."""
    if value in (None, ""):
        return default
    n = int(value)
    if not 0 <= n <= upper:
        raise ValueError(f"{name} must be in 0..{upper:,} (got {value})")
    return n


def bound(value: str | None) -> float | None:
    if value in (None, ""):
        return None
    x = float(value)
    if math.isnan(x):
        raise ValueError(f"a range bound must be a number (got {value})")
    return x


def _map_by(value: str | None) -> str:
    if value in (None, "", "image", "caption"):
        return value or "image"
    raise ValueError(f"mapby must be image or caption (got {value[:40]!r})")


def parse_box(value: str | None) -> tuple[float, float, float, float] | None:
    """`x0:y0:x1:y1` (map coordinates, any two opposite corners) as (left, bottom, right, top)."""
    if value in (None, ""):
        return None
    parts = value.split(":")
    if len(parts) != 4:
        raise ValueError(f"box must be x0:y0:x1:y1 (got {value})")
    try:
        x0, y0, x1, y1 = (float(v) for v in parts)
    except ValueError:
        raise ValueError(f"box must be four finite numbers (got {value})") from None
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
        raise ValueError(f"box must be four finite numbers (got {value})")
    return (min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1))


def parse_query(params) -> Query:
    ranges = []
    for spec in params.getlist("range"):
        col, _, rest = spec.partition(":")
        lo, _, hi = rest.partition(":")
        ranges.append((col, bound(lo), bound(hi)))
    return Query(
        view="removed" if params.get("view") == "removed" else "kept",
        reason=params.get("reason") or None,
        sources=tuple(s for s in params.getlist("source") if s),
        folder=None if not params.get("folder") else count(params.get("folder"), "folder", 0, MAX_OFFSET),
        text=(params.get("q") or "").strip(),
        regex=params.get("re") in ("1", "true"),
        where=_where(params.get("where")),
        tag=params.get("tag") or "",
        ranges=tuple(ranges),
        sort=params.get("sort") or None,
        descending=params.get("desc") in ("1", "true"),
        box=parse_box(params.get("box")),
        lasso=parse_lasso(params.get("lasso")),
        map_by=_map_by(params.get("mapby")),
        offset=count(params.get("offset"), "offset", 0, MAX_OFFSET),
        limit=max(1, min(PAGE_MAX, count(params.get("limit"), "limit", 48, MAX_OFFSET))),
    )


MAX_LASSO = 400  # vertices of a lasso: a hand-drawn outline, simplified by the page


def parse_lasso(value: str | None) -> tuple[tuple[float, float], ...] | None:
    """`x,y;x,y;...` (map coordinates, 3 to MAX_LASSO vertices) as a polygon."""
    if value in (None, ""):
        return None
    parts = value.split(";")
    if not 3 <= len(parts) <= MAX_LASSO:
        raise ValueError(f"lasso must have 3 to {MAX_LASSO} points x,y;x,y;... (got {len(parts)})")
    points = []
    for part in parts:
        try:
            x, y = (float(v) for v in part.split(","))
        except ValueError:
            raise ValueError(f"lasso points are x,y pairs of numbers (got {part[:40]!r})") from None
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError("lasso points must be finite numbers")
        points.append((x, y))
    return tuple(points)


MAX_WHERE = 2_000  # characters of a field query: a filter, not a program


def _where(value: str | None) -> str:
    text = (value or "").strip()
    if len(text) > MAX_WHERE:
        raise ValueError(f"where must be at most {MAX_WHERE:,} characters (got {len(text):,})")
    return text
