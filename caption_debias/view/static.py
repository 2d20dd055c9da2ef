"""`view --static`: one self-contained HTML file (the same page, its rows and thumbnails embedded).

A seeded sample of kept rows and up to N removed rows per reason, each duplicate with the kept
row it matched; every thumbnail a data: URL, the script and stylesheet inline, so the file opens
from disk (file://) with no server and nothing fetched.

The file stays inert and whole whatever the rows hold: the rows are JSON in a data block written
by json_text.dumps (nothing in it can end the element or start a comment), and a
Content-Security-Policy in the page lets only its own two scripts run (by their sha256).
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows.files import Refused
from caption_debias.folder_rows.thumbs import ThumbCache, placeholder_svg
from caption_debias.view import json_text
from caption_debias.view.data import ViewData

BOOT = "window.CAPTION_DEBIAS_SNAPSHOT = JSON.parse(document.getElementById('snapshot').textContent);"

ASSETS = Path(__file__).parent / "assets"


def _data_url(data: ViewData, thumbs: ThumbCache, folder: int, shard: int | None, row: int | None, removed: int | None):
    try:
        source = data.image_source(folder, shard, row, removed)
        jpeg = thumbs.for_source(source)
        return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")
    except Refused as why:
        return "data:image/svg+xml;base64," + base64.b64encode(placeholder_svg(str(why))).decode("ascii")


def _address(card_id: str) -> tuple[int, int, int]:
    f, s, r = card_id.split(":")
    return int(f), int(s), int(r)


def snapshot(data: ViewData, sample: int, per_reason: int, seed: int, thumbs: ThumbCache) -> dict[str, Any]:
    import numpy as np
    import polars as pl

    rng = np.random.default_rng(seed)
    index = data.index()
    picks: np.ndarray | list[int] = (
        np.sort(rng.choice(index.height, size=min(sample, index.height), replace=False)) if index.height else []
    )
    chosen = index[picks] if len(picks) else index.head(0)
    details: dict[str, Any] = {}
    kept = []
    for f, s, r in zip(chosen["_folder"], chosen["_shard"], chosen["_row"]):
        d = data.detail(int(f), int(s), int(r))
        d["thumb"] = _data_url(data, thumbs, int(f), int(s), int(r), None)
        d.pop("link", None)
        details[d["id"]] = d
        kept.append({k: v for k, v in d.items() if k not in ("columns", "sentence_tokens")})
    removed, pairs = [], {}
    frames = [f.removed for f in data.folders if f.removed is not None]
    if frames and per_reason > 0:
        all_removed = pl.concat(frames, how="vertical_relaxed")
        for reason in data.reasons():
            rows = all_removed.filter(pl.col("reason") == reason)
            take = np.sort(rng.choice(rows.height, size=min(per_reason, rows.height), replace=False))
            for f, i in zip(rows[take]["_folder"], rows[take]["_removed"]):
                p = data.pair(int(f), int(i))
                card = p["removed"]
                card["thumb"] = _data_url(data, thumbs, int(f), None, None, int(i))
                card.pop("link", None)
                if p["match"] is not None:
                    p["match"]["thumb"] = _data_url(data, thumbs, *_address(p["match"]["id"]), None)
                    p["match"].pop("link", None)
                details[card["id"]] = card
                pairs[card["id"]] = p
                removed.append(card)
    meta = data.meta()
    reasons: dict[str, int] = {}
    for c in removed:
        reasons[c["reason"]] = reasons.get(c["reason"], 0) + 1
    note = f"{len(kept):,} of {data.total_rows:,} kept rows sampled (seed {seed})"
    if frames:
        note += f"; up to {per_reason} removed rows per reason of {meta['removed']:,}"
    meta.update(rows=len(kept), removed=len(removed), reasons=reasons, map=False)  # the map needs the server
    return {"meta": meta, "kept": kept, "removed": removed, "details": details, "pairs": pairs, "note": note}


def _policy(scripts: list[str]) -> str:
    """The snapshot's Content-Security-Policy: these inline scripts (by hash), inline styles, data: images."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode("utf-8")).digest()).decode("ascii") + "'" for s in scripts
    )
    return f"default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"


def render(snap: dict[str, Any]) -> str:
    page = (ASSETS / "index.html").read_text("utf-8")
    css = (ASSETS / "view.css").read_text("utf-8")
    js = (ASSETS / "view.js").read_text("utf-8").replace("</script", "<\\/script")
    page = page.replace('<link rel="stylesheet" href="assets/view.css">', f"<style>{css}</style>")
    policy = f'<meta http-equiv="Content-Security-Policy" content="{_policy([BOOT, js])}">'
    page = page.replace('<meta charset="utf-8">', f'<meta charset="utf-8">\n{policy}', 1)
    boot = (
        f'<script id="snapshot" type="application/json">{json_text.dumps(snap)}</script>\n'
        f"<script>{BOOT}</script>\n"
        f"<script>{js}</script>"
    )
    return page.replace('<script src="assets/view.js"></script>', boot)


def write_static(data: ViewData, out: str | Path, *, sample: int, per_reason: int, seed: int, thumbs_dir=None) -> Path:
    """Write the snapshot to OUT (a .html file, or OUT/index.html for a folder); never inside a viewed folder."""
    out = Path(out)
    target = out if out.suffix.lower() in (".html", ".htm") else out / "index.html"
    read = [place for f in data.folders for place in (f.path, f.image_root) if place and not storage.is_remote(place)]
    storage.refuse_overlap(read, out, what="--static")  # the viewer never writes where it reads (a local file)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--static {out}: cannot create the folder ({exc.strerror})") from None
    html = render(snapshot(data, sample, per_reason, seed, ThumbCache(thumbs_dir)))
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(html, "utf-8")
    tmp.replace(target)
    return target
