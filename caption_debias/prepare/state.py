"""Output folder layout and resume state: one small sidecar per finished shard.

OUT/manifest.json and OUT/rejects.jsonl are written last; OUT/shards/part-NNNNN.parquet are
the shards; OUT/.prepare/state.json holds the options that shape the output and
OUT/.prepare/part-NNNNN.json each finished chunk's rows, sha256, rejects and counts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from caption_debias import shard_digests, storage
from caption_debias.dataset import MANIFEST, REJECTS, STATE_DIR
from caption_debias.errors import UserError
from caption_debias.locking import LOCK_FILES
from caption_debias.prepare.writer import write_json

SHARDS_DIR = "shards"
STATE_FILE = "state.json"


def shard_name(index: int) -> str:
    return f"{SHARDS_DIR}/part-{index:05d}.parquet"


def sidecar_path(out: Path, index: int) -> Path:
    return out / STATE_DIR / f"part-{index:05d}.json"


def load_sidecar(out: Path, index: int, fingerprint: str) -> dict[str, Any] | None:
    """The finished chunk's sidecar when it matches this chunk and its shard is in place, else None."""
    path = sidecar_path(out, index)
    try:
        side = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if side.get("fingerprint") != fingerprint:
        return None
    if side.get("path") is not None:
        shard = out / side["path"]
        if not shard.is_file() or shard.stat().st_size != side.get("bytes"):
            return None
        if not storage.is_remote(shard) and shard_digests.file_sha256(shard) != side.get("sha256"):
            return None  # replaced or edited since it was written: redo it
    return side


def start(out: Path, shaping: dict[str, Any], overwrite: bool) -> bool:
    """Prepare OUT for a run; returns True when it resumes an earlier run with the same options.

    Only a run that wrote at least one shard is resumed (or protected by "different
    options"): one that failed or was killed before that left nothing worth keeping, so the
    next command starts afresh whatever its options. The lock files are never removed.
    """
    state_path = out / STATE_DIR / STATE_FILE
    ours = [out / MANIFEST, out / REJECTS, out / SHARDS_DIR, out / STATE_DIR]
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    others = [p.name for p in out.iterdir() if p not in ours and p.name not in LOCK_FILES] if out.is_dir() else []
    finished = state_path.is_file() and any((out / SHARDS_DIR).glob("part-*.parquet"))
    if finished and not overwrite:
        try:
            before = json.loads(state_path.read_text("utf-8")).get("options", {})
        except ValueError:
            before = None
        if before != shaping:
            changed = sorted(k for k in set(before or {}) | set(shaping) if (before or {}).get(k) != shaping.get(k))
            raise UserError(
                f"{out} was prepared with different options ({', '.join(changed) or 'unreadable state'}); "
                "use the same options to resume, or --overwrite to start over"
            )
        (out / SHARDS_DIR).mkdir(exist_ok=True)
        return True
    if others and not overwrite and not state_path.is_file():
        raise UserError(
            f"--out {out}: folder is not empty and holds no prepare run "
            f"({', '.join(sorted(others)[:3])}); use an empty folder or --overwrite"
        )
    # --overwrite, a run that finished no chunk, or a new folder: start from nothing
    for p in ours:
        if p.is_dir():
            storage.remove_tree(p)
        elif p.exists():
            p.unlink()
    (out / STATE_DIR).mkdir(parents=True, exist_ok=True)
    write_json({"options": shaping}, state_path)
    (out / SHARDS_DIR).mkdir(exist_ok=True)
    return False


def remove_beyond(out: Path, n_chunks: int) -> None:
    """Drop shards and sidecars of chunks an earlier run had past this run's last one."""
    for folder, pattern in ((out / SHARDS_DIR, "part-*.parquet"), (out / STATE_DIR, "part-*.json")):
        for p in folder.glob(pattern):
            try:
                index = int(p.stem.split("-")[1])
            except (IndexError, ValueError):
                continue
            if index >= n_chunks:
                p.unlink()
    for folder in (out, out / SHARDS_DIR, out / STATE_DIR):
        for tmp in folder.glob(".*.tmp-*"):  # files a killed run was writing (write-then-rename temps)
            tmp.unlink()
