"""A shard is what its manifest says: its sha256, recorded when it was written, checked before use.

prepare and curate record each shard's sha256 in manifest.json (schemas/manifest.schema.json);
readers call `mismatch` before reading any row, so a shard replaced by another (even one with
the same row count) is refused in one line naming it, never read. Digests are checked on local
folders (hashing costs a fraction of reading the shard: docs/benchmarks.md "Shard digests");
on an object store the row counts are checked, not the bytes, since hashing would download the
whole folder a second time. A file whose size and mtime have not changed since this process
checked it is not hashed again.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from caption_debias import storage

_checked: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, this process
_noted: set[str] = set()  # folders whose missing digests were noted once


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a local file, remembered while its size and mtime stay the same."""
    st = path.stat()
    ident = (str(path), st.st_size, st.st_mtime_ns)
    digest = _checked.get(ident)
    if digest is None:
        digest = sha256_file(path)
        _checked[ident] = digest
    return digest


def mismatch(folder: Any, shards: Sequence[Mapping[str, Any]]) -> str | None:
    """What is wrong with the first listed shard whose bytes differ from its recorded sha256, or None.

    A manifest without digests (written before they were recorded) is read, with one note on
    stderr per folder and process: its rows are counted but their bytes cannot be checked.
    """
    if storage.is_remote(folder):
        return None
    missing = 0
    for shard in shards:
        want = shard.get("sha256")
        if not isinstance(want, str):
            missing += 1
            continue
        found = file_sha256(Path(folder) / shard["path"])
        if found != want:
            return (
                f"shard {shard['path']} is not the one manifest.json lists (sha256 {found[:12]}…, listed {want[:12]}…)"
            )
    if missing and str(folder) not in _noted:
        _noted.add(str(folder))
        print(
            f"caption-debias: note: {folder}: manifest.json records no sha256 for {missing} shard(s) "
            "(written by an older caption-debias): their row counts are checked, their contents are not",
            file=sys.stderr,
        )
    return None
