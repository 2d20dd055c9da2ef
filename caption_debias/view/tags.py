"""`view --tags FILE`: the curator's tags on rows, kept in one file the user names, never in a data folder.

The file is JSON lines, one row a line: `{"key": "...", "tags": ["blurry", "keep"]}`, sorted by key,
rewritten whole (a temporary file, then a rename) on every change, so it is always one whole file a
later `view --tags` or a script reads. Tag names are short words (TAG_PATTERN); keys are any text.
A tag's rows export as a keys file (JSON strings, one a line: what curate's --exclude-keys,
--include-keys and --keep-keys read).

The page writes through one route, POST /api/tags, which answers only a same-origin JSON request
(view/app.py): another site's page cannot make the browser tag rows (a form post has no JSON type,
and a fetch with one is refused its preflight).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Iterable

from caption_debias.errors import UserError

TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,39}")  # a word: no spaces, no markup
MAX_FILE_BYTES = 64 << 20
MAX_KEYS_PER_CHANGE = 100_000


def check_name(tag: Any) -> str:
    if not isinstance(tag, str) or not TAG_PATTERN.fullmatch(tag):
        raise ValueError("a tag is 1 to 40 letters, digits or _ . : - (beginning with a letter or digit)")
    return tag


class TagFile:
    """The tags of rows by key, as the file holds them; changes written through to it."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self.tags: dict[str, set[str]] = self._read()
        self.version = 0  # changes since start: a page's cached selection by tag is not reused after one

    def _read(self) -> dict[str, set[str]]:
        where = f"--tags {self.path}"
        if not self.path.exists():
            if not self.path.parent.is_dir():
                raise UserError(f"{where}: no folder {self.path.parent} to write it in")
            return {}
        if not self.path.is_file():
            raise UserError(f"{where}: not a regular file")
        if self.path.stat().st_size > MAX_FILE_BYTES:
            raise UserError(f"{where}: larger than {MAX_FILE_BYTES >> 20} MiB (a tags file is a few rows' tags)")
        out: dict[str, set[str]] = {}
        for n, line in enumerate(self.path.read_text("utf-8").split("\n"), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key, tags = row["key"], row["tags"]
                if not isinstance(key, str) or not isinstance(tags, list):
                    raise TypeError
                out.setdefault(key, set()).update(check_name(t) for t in tags)
            except (ValueError, KeyError, TypeError):
                raise UserError(f'{where}: line {n} is not {{"key": ..., "tags": [...]}} with tags as words') from None
        return {k: v for k, v in out.items() if v}

    def names(self) -> dict[str, int]:
        """tag -> rows, most used first."""
        counts: dict[str, int] = {}
        for tags in self.tags.values():
            for t in tags:
                counts[t] = counts.get(t, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def keys_of(self, tag: str) -> list[str]:
        return sorted(k for k, tags in self.tags.items() if tag in tags)

    def change(self, keys: Iterable[Any], tag: Any, on: bool) -> dict[str, Any]:
        """Add (`on`) or remove `tag` on the rows of `keys`; the file rewritten. ValueError: the page's 400."""
        tag = check_name(tag)
        keys = list(keys)
        if len(keys) > MAX_KEYS_PER_CHANGE or not all(isinstance(k, str) for k in keys):
            raise ValueError(f"keys: at most {MAX_KEYS_PER_CHANGE:,} strings a change")
        with self._lock:
            for key in keys:
                if on:
                    self.tags.setdefault(key, set()).add(tag)
                elif key in self.tags:
                    self.tags[key].discard(tag)
                    if not self.tags[key]:
                        del self.tags[key]
            self._write()
            self.version += 1
        return {"tag": tag, "rows": len(self.keys_of(tag))}

    def _write(self) -> None:
        lines = [json.dumps({"key": k, "tags": sorted(self.tags[k])}, ensure_ascii=False) for k in sorted(self.tags)]
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("".join(line + "\n" for line in lines))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def of(self, keys: Iterable[str | None]) -> list[list[str]]:
        return [sorted(self.tags.get(k, ())) if k is not None else [] for k in keys]
