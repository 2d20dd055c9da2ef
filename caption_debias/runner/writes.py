"""Atomic writes: a temp name, fsync, rename (an object store: one upload under the final name); a failure is one line."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.shard_digests import sha256_file
from caption_debias.worker_life import exit_if_orphaned

TEMP_MARK = ".tmp-"  # write-then-rename temps are named .NAME.tmp-PID beside their file


class WriteFailed(UserError):
    """An output file could not be written (the disk, not the input, is at fault)."""


def os_error_text(exc: OSError) -> str:
    """'No space left on device' rather than pyarrow's or Python's longer forms."""
    if exc.errno:
        return os.strerror(exc.errno)
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def temp_path(path: Path) -> Path:
    """Where `path` is written before its rename (a local temp file for a remote path)."""
    if storage.is_remote(path):  # written locally, then put under `path` (storage.put_local)
        return storage.local_temp(path.name)
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}")


def is_temp(path: Path) -> bool:
    """A write-then-rename temp file a killed run may have left."""
    return path.name.startswith(".") and TEMP_MARK in path.name


@contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a temp path to write; synced and renamed to `path` after, removed on failure."""
    if storage.is_remote(path):
        with _remote_atomic(path) as tmp:
            yield tmp
        return
    tmp = temp_path(path)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        exit_if_orphaned(tmp)  # a worker whose command died holds no lock: it must not publish
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteFailed(f"{path}: cannot write ({os_error_text(exc)})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def _remote_atomic(path) -> Iterator[Path]:
    """The object-store analogue: a local temp file, put under `path` once it is complete."""
    try:
        with storage.staged(path) as tmp:
            yield tmp
    except OSError as exc:
        raise WriteFailed(f"{path}: cannot write ({os_error_text(exc)})") from None


def write_shard(table, path: Path) -> str:
    """Write a zstd Parquet shard (a pyarrow Table) atomically; returns its sha256."""
    import pyarrow.parquet as pq

    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=min(max(len(table), 1), 8192))
        digest = sha256_file(tmp)
    return digest


def write_json(data: Any, path: Path) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str) + "\n", encoding="utf-8")


def write_text(text_lines: Iterable[str], path: Path) -> None:
    """Write lines (an iterable of str) atomically."""
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            for line in text_lines:
                fh.write(line)
