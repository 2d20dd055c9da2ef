"""One writer per output folder: a lock held for the whole run of a command that writes it.

filelock's native lock is a kernel flock, released when its process ends, so a lock left by
a killed run never blocks the next one. The holder (pid, host, command) is written to a
side file so that a refused run can say who holds the folder.

A remote folder (an fsspec URL, caption_debias.storage) has no flock: its lock is the holder
record itself, an object created with exclusive create (fsspec's "xb" mode) where the store
has it, read back to check, refreshed by a heartbeat while held and deleted at the end. A
record whose heartbeat stopped (a killed run) is taken over after STALE_S, at once when its
holder was on this host and its pid is gone. docs/storage.md says what this guarantees.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from caption_debias import storage
from caption_debias.errors import UserError

LOCK_FILE = ".caption-debias.lock"
HOLDER_FILE = ".caption-debias.lock.json"
# Files a command must keep when it clears its folder (for example prepare --overwrite).
LOCK_FILES = frozenset({LOCK_FILE, HOLDER_FILE})
# Remote folders: how often a holder refreshes its record, and after how long without it the lock is free.
HEARTBEAT_S = 60.0
STALE_S = 600.0


class FolderLocked(UserError):
    """Another process is writing this folder."""

    exit_code = 4


def lock_files(folder: str | Path, beside: bool = False) -> tuple[Path, Path]:
    """(lock file, holder file) of `folder`: inside it, or beside it as .NAME.caption-debias.lock[.json]
    (for a folder that must hold only its own files, such as an export meant to be uploaded as is)."""
    place = storage.as_path(folder)
    if beside:
        return place.parent / f".{place.name}{LOCK_FILE}", place.parent / f".{place.name}{HOLDER_FILE}"
    return place / LOCK_FILE, place / HOLDER_FILE


def holder(folder: str | Path, beside: bool = False) -> dict | None:
    """Who last took the lock of `folder` (None if unknown or unreadable)."""
    try:
        value = json.loads(lock_files(folder, beside)[1].read_text("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
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
def folder_lock(folder: str | Path, command: str, beside: bool = False) -> Iterator[Path]:
    """Hold `folder`'s lock (creating the folder) or raise FolderLocked at once.

    `beside`: the lock files sit next to the folder, not in it (a local folder only)."""
    if storage.is_remote(folder):
        with _object_lock(storage.as_path(folder), command) as held:
            yield held
        return
    from filelock import FileLock, Timeout

    folder = Path(folder)
    lock_path, holder_path = lock_files(folder, beside)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(lock_path), timeout=0)
        lock.acquire()
    except Timeout:
        raise FolderLocked(
            f"{folder}: in use by {_describe(_current_holder(folder, beside))}; "
            "wait for it to finish or choose another folder"
        ) from None
    except OSError as exc:
        raise UserError(f"{folder}: cannot lock the folder ({exc.strerror or exc})") from None
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": time.time()}
        tmp = holder_path.parent / f"{holder_path.name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(info), "utf-8")
        os.replace(tmp, holder_path)
        yield folder
    finally:
        lock.release()


HOLDER_WAIT_S = 2.0


def _current_holder(folder: Path, beside: bool) -> dict | None:
    """The record of the process holding the lock now. The holder writes it just after taking the
    lock, so a refused process can look in between (no record yet, or the last holder's): look
    again for up to HOLDER_WAIT_S until the record names a live process on this host (or another
    host, which cannot be checked)."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        info = holder(folder, beside)
        fresh = info is not None and (
            info.get("host") != socket.gethostname() or (isinstance(info.get("pid"), int) and _pid_alive(info["pid"]))
        )
        if fresh or time.monotonic() >= deadline:
            return info if fresh else None
        time.sleep(0.05)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _stale(info: dict) -> bool:
    """A record whose holder stopped refreshing it, or whose process on this host is gone."""
    if info.get("host") == socket.gethostname() and isinstance(info.get("pid"), int):
        if not _pid_alive(info["pid"]):
            return True
    beat = info.get("heartbeat", info.get("since"))
    return not isinstance(beat, (int, float)) or time.time() - beat > STALE_S


def _create(record: Any, data: bytes) -> bool:
    """Write the lock object unless one exists; False when one does.

    Exclusive create where the backend implements fsspec's "x" mode (memory, local, s3fs on
    stores honouring If-None-Match); elsewhere check-then-write, which the read-back after it
    guards on a best-effort basis. The check comes first on every backend: some accept "xb"
    as a plain write.
    """
    fs, path = record.fs, record.path
    fs.invalidate_cache(path)  # listings may be cached (s3fs): ask the store itself
    if fs.exists(path):
        return False
    try:
        with fs.open(path, "xb") as fh:
            fh.write(data)
        return True
    except FileExistsError:
        return False
    except (ValueError, NotImplementedError, TypeError):  # this backend has no exclusive create
        fs.pipe_file(path, data)
        return True


class _Heartbeat(threading.Thread):
    """Refreshes the holder record every HEARTBEAT_S while the command runs; notices a takeover."""

    def __init__(self, record: Any, info: dict) -> None:
        super().__init__(name="caption-debias-lock-heartbeat", daemon=True)
        self.record, self.info = record, info
        self.stop = threading.Event()
        self.lost: dict | None = None

    def run(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            current = _read_record(self.record)
            if current == {}:
                continue  # unreadable just now (a store hiccup): the next beat looks again
            if current is not None and current.get("token") != self.info["token"]:
                self.lost = current
                print(
                    f"caption-debias: warning: the lock of {self.record.parent} was taken over by "
                    f"{_describe(current)}; this run's output may be mixed with its",
                    file=sys.stderr,
                )
                return
            self.info["heartbeat"] = time.time()
            try:
                self.record.fs.pipe_file(self.record.path, json.dumps(self.info).encode("utf-8"))
            except OSError:
                pass  # a store hiccup: the next beat tries again, well before STALE_S


def _read_record(record: Any) -> dict | None:
    try:
        value = json.loads(record.fs.cat_file(record.path))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return value if isinstance(value, dict) else {}


@contextmanager
def _object_lock(folder: Any, command: str) -> Iterator[Any]:
    """The remote folder lock: a holder record created exclusively, refreshed, deleted at the end."""
    record = folder / HOLDER_FILE
    info = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": time.time()}
    info.update(heartbeat=info["since"], token=uuid.uuid4().hex)
    try:
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder}: exists and is not a folder")
        for attempt in range(2):
            if _create(record, json.dumps(info).encode("utf-8")):
                break
            current = _read_record(record)
            if current is None:
                continue  # its holder released it between our check and our read: try again
            if attempt or not current or not _stale(current):
                where = _describe(current or None)
                raise FolderLocked(
                    f"{folder}: in use by {where}; wait for it to finish or choose another folder "
                    f"(a lock not refreshed for {STALE_S:.0f} s is taken over; if you know no command runs on it, "
                    f"delete {record})"
                )
            record.fs.rm_file(record.path)  # stale: its holder is gone
        current = _read_record(record)
        if not current or current.get("token") != info["token"]:  # another writer won the race
            raise FolderLocked(
                f"{folder}: in use by {_describe(current or None)}; wait for it or choose another folder"
            )
    except OSError as exc:
        raise UserError(f"{folder}: cannot lock the folder ({exc.strerror or exc})") from None
    beat = _Heartbeat(record, info)
    beat.start()
    try:
        yield folder
    finally:
        beat.stop.set()
        beat.join()
        current = _read_record(record)
        if current and current.get("token") == info["token"]:
            try:
                record.fs.rm_file(record.path)
            except OSError:
                pass  # left behind: the next run takes it over once stale
    if beat.lost is not None:
        raise FolderLocked(
            f"{folder}: this run's lock was taken over by {_describe(beat.lost)} while it ran; "
            "check the folder, or rerun the command"
        )
