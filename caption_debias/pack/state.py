"""Output folder layout and resume state: one small sidecar per finished tar.

OUT/NNNNN.tar are the tars; OUT/sizes.json (open_clip_train's per-tar sample counts),
OUT/removed.jsonl and OUT/manifest.json are written last; OUT/.pack/state.json holds the
options (and the input's manifest digest) that shape the output, OUT/.pack/NNNNN.json
each finished tar's counts, digest and removals.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.locking import LOCK_FILES
from caption_debias.pack.tars import STATE_DIR, sidecar_path
from caption_debias.prepare.writer import write_json

KIND = "caption-debias packed"  # manifest["kind"]: tells a packed folder from a prepared one
MANIFEST = "manifest.json"
SIZES = "sizes.json"  # open_clip_train's get_dataset_size reads it beside the tars
REMOVED = "removed.jsonl"
STATE_FILE = "state.json"
_TAR = re.compile(r"\d{5,}\.tar")


def _ours(path: Path) -> bool:
    return path.name in (MANIFEST, SIZES, REMOVED, STATE_DIR) or bool(_TAR.fullmatch(path.name))


def start(out: Path, shaping: dict[str, Any], overwrite: bool) -> bool:
    """Prepare OUT for a run; True when it resumes an earlier run with the same options."""
    state_path = out / STATE_DIR / STATE_FILE
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    entries = [p for p in out.iterdir() if p.name not in LOCK_FILES] if out.is_dir() else []
    others = sorted(p.name for p in entries if not _ours(p) and not p.name.startswith("."))
    if overwrite or (not state_path.is_file() and not others):
        # --overwrite, or a run killed before its state was written: start from nothing
        for p in entries:
            if _ours(p) or p.name.startswith(".") and ".tmp-" in p.name:
                storage.remove_tree(p) if p.is_dir() else p.unlink()
    elif state_path.is_file():
        try:
            before = json.loads(state_path.read_text("utf-8")).get("options", {})
        except ValueError:
            before = None
        if before != shaping:
            changed = sorted(k for k in set(before or {}) | set(shaping) if (before or {}).get(k) != shaping.get(k))
            raise UserError(
                f"{out} was packed with different options or input ({', '.join(changed) or 'unreadable state'}); "
                "use the same ones to resume, or --overwrite to start over"
            )
        (out / MANIFEST).unlink(missing_ok=True)  # a manifest is only ever there for a finished run
        return True
    else:
        raise UserError(
            f"--out {out}: folder is not empty and holds no pack run ({', '.join(others[:3])}); "
            "use an empty folder or --overwrite"
        )
    (out / STATE_DIR).mkdir(parents=True, exist_ok=True)
    write_json({"options": shaping}, state_path)
    return False


def load_sidecar(out: Path, index: int, fingerprint: str) -> dict[str, Any] | None:
    """The finished tar's sidecar when it matches this chunk and its tar is in place, else None."""
    try:
        side = json.loads(sidecar_path(out, index).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if side.get("fingerprint") != fingerprint:
        return None
    tar = out / str(side.get("path"))
    if not tar.is_file() or tar.stat().st_size != side.get("bytes"):
        return None
    return side


def remove_beyond(out: Path, n_tars: int) -> None:
    """Drop tars and sidecars an earlier, longer run left past this run's last one, and temp files."""
    for folder, pattern in ((out, "*.tar"), (out / STATE_DIR, "*.json")):
        for p in folder.glob(pattern):
            stem = p.name.split(".")[0]
            if stem.isdigit() and int(stem) >= n_tars:
                p.unlink()
    for tmp in out.glob(".*.tmp-*"):  # what a killed run was writing (write-then-rename temps)
        tmp.unlink()
