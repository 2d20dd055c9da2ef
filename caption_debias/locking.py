"""One writer per output folder: a lock held for the whole run of a command that writes it.

filelock's native lock is a kernel flock, released when its process ends, so a lock left by
a killed run never blocks the next one. The holder (pid, host, command) is written to a
side file so that a refused run can say who holds the folder.
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from caption_debias.errors import UserError

LOCK_FILE = ".caption-debias.lock"
HOLDER_FILE = ".caption-debias.lock.json"
# Files a command must keep when it clears its folder (for example prepare --overwrite).
LOCK_FILES = frozenset({LOCK_FILE, HOLDER_FILE})


class FolderLocked(UserError):
    """Another process is writing this folder."""

    exit_code = 4


def holder(folder: str | Path) -> dict | None:
    """Who last took the lock of `folder` (None if unknown or unreadable)."""
    try:
        value = json.loads((Path(folder) / HOLDER_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _describe(info: dict | None) -> str:
    if not info:
        return "another process (holder unknown)"
    where = f"pid {info.get('pid')}"
    if info.get("host") and info.get("host") != socket.gethostname():
        where += f" on {info['host']}"
    return f"caption-debias {info.get('command', '?')} ({where})"


@contextmanager
def folder_lock(folder: str | Path, command: str) -> Iterator[Path]:
    """Hold `folder`'s lock (creating the folder) or raise FolderLocked at once."""
    from filelock import FileLock, Timeout

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(folder / LOCK_FILE), timeout=0)
        lock.acquire()
    except Timeout:
        raise FolderLocked(
            f"{folder}: in use by {_describe(holder(folder))}; wait for it to finish or choose another folder"
        ) from None
    except OSError as exc:
        raise UserError(f"{folder}: cannot lock the folder ({exc.strerror or exc})") from None
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": time.time()}
        tmp = folder / f"{HOLDER_FILE}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(info), "utf-8")
        os.replace(tmp, folder / HOLDER_FILE)
        yield folder
    finally:
        lock.release()
