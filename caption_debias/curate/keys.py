"""`curate --exclude-keys FILE` and `--include-keys FILE`: rows a curator chose by key (from `view`'s export).

A keys file is UTF-8 text, one key a line (blank lines skipped; a key is the whole line, only its
line ending removed), as `caption-debias view` exports a selection. A file that is missing, not
UTF-8, larger than MAX_BYTES or without a key is one line before any work; keys that name no row of
the inputs are counted and said in one line (none found at all: one line and no run, since the run
would do nothing the user asked for).

The decision is the funnel's last step (dedup.decide, REASONS): a listed row goes as
`excluded_by_user` only when every other reason kept it, so the output is the one the same run
without the flag writes, less the rows listed (`--exclude-keys`) or less the rows not listed
(`--include-keys`); an excluded row still counts as the earlier kept row its duplicates matched.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from caption_debias.errors import UserError

MAX_BYTES = 256 << 20  # about six million keys of 40 characters: a selection, not a dump
EXAMPLES = 3  # keys named in the "not in any input" line
FLAGS = {"exclude": "--exclude-keys", "include": "--include-keys"}


@dataclass(frozen=True)
class KeyList:
    """The keys of one file, as read once: the digest recorded is that of the bytes the keys came from."""

    flag: str
    path: str
    keys: frozenset[str]
    sha256: str

    def record(self) -> dict[str, Any]:
        """What the manifest keeps of the file (curation.thresholds.user_keys)."""
        return {"path": self.path, "sha256": self.sha256, "keys": len(self.keys)}


def _stat(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_keys(path: str, flag: str) -> KeyList:
    """The keys of `path`; a file that cannot be one is a UserError naming the flag and the file."""
    try:
        stamp = _stat(path)
    except OSError as exc:
        raise UserError(f"{flag} {path}: {exc.strerror or 'cannot read it'}") from None
    return _read(path, flag, stamp)


@lru_cache(maxsize=4)
def _read(path: str, flag: str, stamp: tuple[int, int, int]) -> KeyList:
    """Read once per (path, inode, size, mtime): options.check(), the thresholds and the decision see one file."""
    if not os.path.isfile(path):
        raise UserError(f"{flag} {path}: not a file")
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UserError(f"{flag} {path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise UserError(f"{flag} {path}: larger than {MAX_BYTES >> 20} MiB (a keys file is one key a line)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{flag} {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    keys = frozenset(line.rstrip("\r") for line in text.split("\n") if line.rstrip("\r"))
    if not keys:
        raise UserError(f"{flag} {path}: no keys (one key a line, as `caption-debias view` exports them)")
    return KeyList(flag, path, keys, hashlib.sha256(data).hexdigest())


def lists(exclude: str | None, include: str | None) -> dict[str, KeyList]:
    """The key files given, by role ("exclude", "include")."""
    given = {"exclude": exclude, "include": include}
    return {role: read_keys(path, FLAGS[role]) for role, path in given.items() if path is not None}


def listed(keys: Any, key_list: KeyList) -> np.ndarray:
    """Which of `keys` (a polars Series or a list of strings) are in the file: a bool array."""
    import polars as pl

    series = keys if isinstance(keys, pl.Series) else pl.Series("key", list(keys), pl.String)
    return series.is_in(pl.Series("k", sorted(key_list.keys), pl.String).implode()).fill_null(False).to_numpy()


def listed_row(key: str | None, key_list: KeyList) -> bool:
    """Specification of `listed` for one row."""
    return key is not None and key in key_list.keys


def not_found(keys: Any, key_list: KeyList) -> list[str]:
    """The file's keys that name no row of `keys`, sorted."""
    import polars as pl

    series = keys if isinstance(keys, pl.Series) else pl.Series("key", list(keys), pl.String)
    present = set(series.filter(series.is_in(pl.Series("k", list(key_list.keys), pl.String).implode())).to_list())
    return sorted(key_list.keys - present)


def check_inputs(shard_paths: list[Any], exclude: str | None, include: str | None) -> dict:
    """Before any work: every key file against the inputs' keys. None of a file's keys in any input is a
    UserError; some missing is one warning line. Returns role -> the file's record with `not_in_inputs`."""
    found = lists(exclude, include)
    if not found:
        return {}
    import polars as pl

    from caption_debias import storage

    with storage.reading(shard_paths):
        keys = (
            pl.concat([pl.read_parquet(str(p), columns=["key"])["key"] for p in shard_paths]) if shard_paths else None
        )
    out = {}
    for role, key_list in found.items():
        missing = not_found(keys if keys is not None else pl.Series("key", [], pl.String), key_list)
        where = f"{key_list.flag} {key_list.path}"
        if len(missing) == len(key_list.keys):
            raise UserError(f"{where}: none of its {len(missing):,} keys is a row of the inputs (e.g. {missing[0]!r})")
        if missing:
            examples = ", ".join(repr(k) for k in missing[:EXAMPLES])
            print(
                f"caption-debias curate: warning: {where}: {len(missing):,} of its {len(key_list.keys):,} keys "
                f"are rows of no input (e.g. {examples}); the others apply",
                file=sys.stderr,
            )
        out[role] = {**key_list.record(), "not_in_inputs": len(missing)}
    return out


def excluded(keys: Any, exclude: KeyList | None, include: KeyList | None) -> tuple[np.ndarray, np.ndarray]:
    """(rows --exclude-keys lists, rows --include-keys does not list) over `keys`, as bool arrays."""
    n = len(keys)
    by_exclude = listed(keys, exclude) if exclude is not None else np.zeros(n, bool)
    by_include = ~listed(keys, include) if include is not None else np.zeros(n, bool)
    return by_exclude, by_include & ~by_exclude


def detail(key_list: KeyList) -> dict[str, Any]:
    """A removed row's detail: which file decided, and its digest."""
    how = "listed in" if key_list.flag == FLAGS["exclude"] else "not listed in"
    return {"by": f"{how} {key_list.flag}", "file": key_list.path, "sha256": key_list.sha256}
