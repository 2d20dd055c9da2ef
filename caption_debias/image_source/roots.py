"""The image root: made absolute where it is typed, followed once, and read through the one gate.

A local root is made absolute from the folder it was typed in and its symlinks are followed
(once, here); each row's path is still checked to stay inside the real root by
image_files.ImageRoot. A URL root (s3://, gs://, hf://, memory://, ...) is kept as typed;
object stores have no symlinks, so a row's path is checked from its text (image_files.path_problem).
`Root.resolved` is the string a manifest records and later stages reuse.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.image_files import (
    MAX_FILE_BYTES,
    MISSING,
    UNREADABLE,
    ImageProblem,
    ImageRoot,
    check_size,
    path_problem,
)

PARQUET_BUFFER = 1 << 16  # pyarrow asks for footers and column chunks itself: small refills, few wasted bytes


@dataclass(frozen=True)
class Root:
    typed: str  # as the user typed it (for messages)
    resolved: str  # absolute real path, or the URL: what a manifest records

    @property
    def remote(self) -> bool:
        return storage.is_remote(self.resolved)

    def where(self, image: str) -> str:
        """The full path or URL of a row's image under the root (a message's 'tried ...')."""
        return f"{self.resolved.rstrip('/')}/{image}" if self.remote else os.path.join(self.resolved, image)

    def named(self) -> str:
        """'/abs/images' or '/abs/images (typed as images)'."""
        return self.resolved if self.typed == self.resolved else f"{self.resolved} (typed as {self.typed})"

    def __str__(self) -> str:
        return self.resolved


def resolve_root(typed: str | os.PathLike | Root, what: str = "--image-root") -> Root:
    """The Root of a folder typed by the user; UserError (one line, naming it as typed and as
    resolved) when there is no such folder."""
    if isinstance(typed, Root):
        return typed
    text = os.fspath(typed)
    resolved = storage.resolve_folder(text)
    if storage.is_remote(resolved):
        path = storage.as_path(resolved)  # UserError when the backend is not installed
        try:
            exists = path.fs.isdir(path.path)
        except Exception as exc:  # noqa: BLE001  each backend raises its own (credentials, network)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise UserError(f"{what} {text}: cannot be listed ({type(exc).__name__}: {first})") from None
    else:
        exists = os.path.isdir(resolved)
    if not exists:
        shown = "" if resolved == text else f" (resolved to {resolved})"
        raise UserError(f"{what} {text}: no such folder{shown}")
    return Root(text, resolved)


class LocalFiles:
    """A local root's files, through image_files.ImageRoot (inside the real root, regular files, bounded)."""

    def __init__(self, root: Root):
        self.guard = ImageRoot(root.resolved)

    def read(self, rel: str) -> bytes:
        return self.guard.read(rel)

    def open(self, rel: str, buffer_size: int = storage.RANGE_BUFFER):
        """A counted, buffered reader on a container file (a tar's size is not an image's)."""
        return storage.counted(self.guard.open(rel, max_bytes=None), buffer_size)

    def file_version(self, rel: str) -> str:
        """The real path, size and modification time of a file under the root (ImageProblem when none)."""
        real = self.guard.resolve(rel)
        try:
            st = real.stat()
        except OSError as exc:
            raise ImageProblem(MISSING, f"no file {rel} under the image root ({exc.strerror})") from None
        return f"{real}|{st.st_size}|{st.st_mtime_ns}"

    def entries(self, rel: str = "") -> dict[str, bool]:
        """name -> is a folder, for the entries of a folder under the root (downloads.py)."""
        folder = self.guard.resolve(rel) if rel else self.guard.real
        with os.scandir(folder) as it:
            return {e.name: e.is_dir() for e in it if e.is_file() or e.is_dir()}


class RemoteFiles:
    """A URL root's objects through fsspec: one HEAD and one GET per file; containers by ranges."""

    def __init__(self, root: Root):
        path = storage.as_path(root.resolved)
        self.fs, self.base = path.fs, path.path.rstrip("/")

    def path(self, rel: str) -> str:
        problem = path_problem(rel)
        if problem is not None:
            raise ImageProblem(UNREADABLE, problem)
        return f"{self.base}/{posixpath.normpath(rel)}" if rel else self.base

    def _open(self, rel: str, **kwargs: Any):
        try:
            return self.fs.open(self.path(rel), "rb", **kwargs)
        except FileNotFoundError:
            raise ImageProblem(MISSING, f"no file {rel} under the image root") from None
        except IsADirectoryError:
            raise ImageProblem(MISSING, f"{rel} is a folder, not a file") from None
        except ImageProblem:
            raise
        except Exception as exc:  # noqa: BLE001  network, permissions: one row's reason
            raise ImageProblem(UNREADABLE, f"{rel}: {type(exc).__name__}: {exc}") from None

    def read(self, rel: str) -> bytes:
        with self._open(rel, cache_type="none") as fh:
            check_size(fh.size, rel)
            try:
                data = fh.read(MAX_FILE_BYTES + 1)
            except Exception as exc:  # noqa: BLE001
                raise ImageProblem(UNREADABLE, f"{rel}: {type(exc).__name__}: {exc}") from None
        check_size(len(data), rel)
        return data

    def open(self, rel: str, buffer_size: int = storage.RANGE_BUFFER):
        return storage.counted(self._open(rel, cache_type="none"), buffer_size)

    def file_version(self, rel: str) -> str:
        """An object's size with its ETag (or modification time): one HEAD (ImageProblem when none)."""
        path = self.path(rel)
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            raise ImageProblem(MISSING, f"no file {rel} under the image root") from None
        except Exception as exc:  # noqa: BLE001  network, permissions
            raise ImageProblem(UNREADABLE, f"{rel}: {type(exc).__name__}: {exc}") from None
        if info.get("type") == "directory":
            raise ImageProblem(MISSING, f"{rel} is a folder, not a file")
        changed = info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime")
        return f"{path}|{info.get('size')}|{changed}"

    def entries(self, rel: str = "") -> dict[str, bool]:
        listing = self.fs.ls(self.path(rel), detail=True)
        return {posixpath.basename(e["name"].rstrip("/")): e["type"] == "directory" for e in listing}


def files_of(root: Root) -> LocalFiles | RemoteFiles:
    return RemoteFiles(root) if root.remote else LocalFiles(root)
