"""`curate --exclude-keys FILE` and `--include-keys FILE`: rows a curator chose by key (from `view`'s export).

A keys file is UTF-8 text, one key a line (blank lines skipped; a BOM and `\\r\\n` line ends allowed).
A line that begins with a double quote is one key written as a JSON string, so it can hold any key
prepare accepts (a line break, a carriage return, a NUL); any other line is the key as it stands. No
key prepare writes begins with a double quote (every key begins with its reader's name and a slash),
so the two forms never meet; `caption-debias view` exports every key as a JSON string (JSON lines).

A file is read once per run, through one descriptor (a regular file, at most MAX_BYTES): the keys and
the sha256 the manifest records come from the same bytes. A file that cannot be one is one line
before any work; keys that name no row of the inputs are counted and said in one line (none found at
all: one line and no run, since the run would do nothing the user asked for). Messages never quote a
whole key: at most SHOWN characters of it, escaped, and its length.

The decision is the funnel's last step (dedup.decide, REASONS): a listed row goes as
`excluded_by_user` only when every other reason kept it, so the output is the one the same run
without the flag writes, less the rows listed (`--exclude-keys`) or less the rows not listed
(`--include-keys`); an excluded row still counts as the earlier kept row its duplicates matched.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from caption_debias.errors import UserError

MAX_BYTES = 256 << 20  # about six million keys of 40 characters: a selection, not a dump
EXAMPLES = 3  # keys named in the "not in any input" line
SHOWN = 80  # characters of one key a message quotes
FLAGS = {"exclude": "--exclude-keys", "include": "--include-keys", "keep": "--keep-keys"}
# what --keep-keys cannot keep: a row whose picture is not there has nothing to train on
UNKEEPABLE = ("image_missing", "image_unreadable")
FORMAT_HINT = "write such a key as a JSON string, as `caption-debias view` exports it"


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


def shown(key: str) -> str:
    """A key as a message quotes it: its first SHOWN characters, escaped (repr), and its length when cut."""
    if len(key) <= SHOWN:
        return repr(key)
    return f"{key[:SHOWN]!r}... ({len(key):,} characters)"


def read_keys(path: str, flag: str) -> KeyList:
    """The keys of `path`; a file that cannot be one is a UserError naming the flag and the file.

    One descriptor: opened without blocking (a FIFO is refused, not waited on), checked to be a
    regular file by fstat, then read; the same file unchanged (device, inode, size, mtime, ctime)
    is parsed once per process."""
    where = f"{flag} {path}"
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UserError(f"{where}: {exc.strerror or 'cannot read it'}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{where}: not a regular file (a keys file is read whole: one key a line)")
        if st.st_size > MAX_BYTES:
            raise UserError(f"{where}: {_too_large()}")
        identity = (path, flag, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if st.st_size > 0 and identity in _parsed:  # /proc files say 0: read them every time
            return _parsed[identity]
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise UserError(f"{where}: {exc.strerror or 'cannot read it'}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_BYTES:
        raise UserError(f"{where}: {_too_large()}")
    key_list = KeyList(flag, path, parse(data, where), hashlib.sha256(data).hexdigest())
    _remember(identity, key_list)
    return key_list


_parsed: dict[tuple, KeyList] = {}


def _remember(at: tuple, key_list: KeyList) -> None:
    """Keep the last few files parsed (validate() and the run read the same file once)."""
    _parsed[at] = key_list
    while len(_parsed) > 4:
        del _parsed[next(iter(_parsed))]


def _too_large() -> str:
    return f"larger than {MAX_BYTES >> 20} MiB (a keys file is a selection: one key a line)"


def parse(data: bytes, where: str = "keys file") -> frozenset[str]:
    """The keys of a keys file's bytes (module docstring); a line that cannot be a key is a UserError
    naming its line number, never its text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    keys = set()
    # split on \n only: str.splitlines would also cut at \x1c, \x85 or U+2028, which a key may hold
    for n, line in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
        line = line.removesuffix("\r")
        if not line.strip():  # no key is blank (each begins with its reader's name)
            continue
        keys.add(_json_key(line, n, where) if line.startswith('"') else _plain_key(line, n, where))
    if not keys:
        raise UserError(f"{where}: no keys (one key a line, as `caption-debias view` exports them)")
    return frozenset(keys)


def _plain_key(line: str, n: int, where: str) -> str:
    for char, name in (("\r", "a carriage return"), ("\0", "a NUL character")):
        if char in line:
            raise UserError(f"{where}: line {n} holds {name}, which a plain line cannot carry ({FORMAT_HINT})")
    return line


def _json_key(line: str, n: int, where: str) -> str:
    try:
        key = json.loads(line)  # begins with a quote: one string literal, no nesting to recurse into
    except ValueError as exc:
        raise UserError(
            f"{where}: line {n} begins with a double quote but is not one JSON string ({getattr(exc, 'msg', exc)})"
        ) from None
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: Parquet strings are UTF-8, so no row's key holds one
        raise UserError(
            f"{where}: line {n} holds a lone surrogate (\\u{ord(key[exc.start]):04x}), which no key holds"
        ) from None
    return key


def lists(exclude: str | None, include: str | None, keep: str | None = None) -> dict[str, KeyList]:
    """The key files given, by role ("exclude", "include", "keep"), each read once (read_keys). A key
    both excluded and kept is one line: the two files disagree about it."""
    given = {"exclude": exclude, "include": include, "keep": keep}
    found = {role: read_keys(path, FLAGS[role]) for role, path in given.items() if path is not None}
    if "exclude" in found and "keep" in found:
        both = sorted(found["exclude"].keys & found["keep"].keys)
        if both:
            raise UserError(
                f"--exclude-keys {found['exclude'].path} and --keep-keys {found['keep'].path} both list "
                f"{len(both):,} keys (e.g. {shown(both[0])}): a row cannot be removed and kept"
            )
    return found


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


def check_inputs(shard_paths: list[Any], found: dict[str, KeyList]) -> dict:
    """Before any work: every key file (as read once, `lists`) against the inputs' keys. None of a
    file's keys in any input is a UserError; some missing is one warning line. Returns role -> the
    file's record with `not_in_inputs`."""
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
            raise UserError(
                f"{where}: none of its {len(missing):,} keys is a row of the inputs (e.g. {shown(missing[0])})"
            )
        if missing:
            examples = ", ".join(shown(k) for k in missing[:EXAMPLES])
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
