"""Rows as the page shows them: cards (sentences with roles and scores, counts, scalars, links).

A card is plain JSON: the page (assets/view.js) and the static snapshot render the same cards.
Everything user-supplied in it is data for the page to escape; the one link it carries is
either the viewer's own `image/...` route or an http(s) URL (`image_link`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import pyarrow as pa

from caption_debias import storage
from caption_debias.folder_rows import sentence_signals as signals
from caption_debias.folder_rows.folders import Folder, is_numeric
from caption_debias.folder_rows.rows import HEAVY, SENTENCE_COLUMNS, RowStore

WEB_SCHEMES = ("http", "https")  # the only URLs a card links to: never javascript:, data:, file:


def sentence_roles(mask: list[bool] | None, n: int) -> list[str]:
    """Each sentence's role from prepare's summary_mask: opening / closing summary, summary (in the middle), detail."""
    mask = list(mask or [])[:n] + [False] * max(0, n - len(mask or []))
    roles = []
    for i, flagged in enumerate(mask):
        if not flagged:
            roles.append("detail")
        elif i == 0:
            roles.append("opening summary")
        elif i == n - 1:
            roles.append("closing summary")
        else:
            roles.append("summary")
    return roles


def image_link(f: Folder, image: str | None) -> str | None:
    """Where "open the image file" points: the viewer's image route for a path under the image root,
    the URL itself for an http(s) image, nothing otherwise."""
    if not image or not isinstance(image, str):
        return None
    if storage.is_url(image):
        return image if urlsplit(image).scheme.lower() in WEB_SCHEMES else None
    if f.image_root is None:
        return None
    return f"image/{f.index}/{quote(image)}"


def _sentences(raw: dict[str, Any]) -> list[dict[str, Any]]:
    sentences = raw.get("sentences")
    if sentences is None:  # schemas/shard.schema.json: caption[start:end].strip() == sentence
        caption = raw.get("caption") or ""
        sentences = [caption[sp["start"] : sp["end"]].strip() for sp in raw.get("sentence_spans") or []]
    roles = sentence_roles(raw.get("summary_mask"), len(sentences))
    per = {c: v for c in SENTENCE_COLUMNS if (v := raw.get(c)) is not None}
    out = []
    for i, text in enumerate(sentences):
        s = {"text": text, "role": roles[i]}
        for c, values in per.items():
            if i < len(values):
                s[c] = values[i]
        out.append(s)
    return out


def card(f: Folder, raw: dict[str, Any], shard: int, row: int) -> dict[str, Any]:
    """A row as the page shows it: sentences with roles and scores, counts, scalars."""
    scalars = {
        c.name: raw.get(c.name)
        for c in f.schema
        if is_numeric(c.type) and c.name in raw and c.name not in ("num_tokens",) and raw.get(c.name) is not None
    }
    if signals.columns_for(f.schema.names):  # the index's sentence signals, row by row (the snapshot filters on them)
        found = signals.row_signals(raw.get("sentence_grounding"), raw.get("summary_mask"), raw.get("sentence_keep"))
        scalars.update({k: v for k, v in found.items() if v is not None})
    return {
        "id": f"{f.index}:{shard}:{row}",
        "folder": f.index,
        "key": raw.get("key"),
        "source": raw.get("source"),
        "split": raw.get("split"),
        "image": raw.get("image"),
        "caption": raw.get("caption"),
        "sentences": _sentences(raw),
        "num_tokens": raw.get("num_tokens"),
        "scalars": scalars,
        "thumb": f"api/thumb?f={f.index}&s={shard}&r={row}",
        "link": image_link(f, raw.get("image")),
    }


def heavy_summary(store: RowStore, f: Folder, shard: int, row: int, fld: pa.Field) -> Any:
    """A short description of a column too large to show whole (bytes, embeddings); token ids whole."""
    if fld.name == "sentence_tokens":
        return store.cell(f.index, shard, row, fld.name)
    t = fld.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return f"<{fld.name}: bytes, not shown>"
    if pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
        return f"<{fld.name}: vector of {t.value_type}, not shown>"
    return f"<{fld.name}: {t}>"


def detail(store: RowStore, folder: int, shard: int, row: int) -> dict[str, Any]:
    """Every column of one row (heavy ones summarised), and its card."""
    f = store.folder(folder)
    raw = store.raw_row(folder, shard, row, detail=True)
    columns = {}
    for fld in f.schema:
        if fld.name in HEAVY:
            columns[fld.name] = heavy_summary(store, f, shard, row, fld)
        elif fld.name in raw:
            columns[fld.name] = raw[fld.name]
    out = card(f, raw, shard, row)
    out["columns"] = columns
    out["sentence_tokens"] = columns.get("sentence_tokens")
    out["folder_name"] = f.name
    out["path"] = f"row {row} of {f.path / f.ds.manifest['shards'][shard]['path']}"
    return out
