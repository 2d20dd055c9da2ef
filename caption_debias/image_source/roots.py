"""The image root: which one (the one rule, below), made absolute where it is typed, followed once,
and read through the one gate.

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
from pathlib import Path
from typing import Any, Mapping, Sequence

from caption_debias import lineage, storage, trust
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

    @property
    def place(self) -> Any:
        """A local root as a pathlib.Path, a URL as its text (what the eval loaders and view take)."""
        return self.resolved if self.remote else Path(self.resolved)

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


# -- which root: the one rule every stage, view, stats, train and eval follow ---------------------
#
# given > recorded > lineage. A given root (--image-root) is the user's choice: made absolute where
# typed, symlinks followed, a URL kept (resolve_root). Otherwise the root the folder's own manifest
# records (`options.image_root`, or the one root all of a score run's inputs were read under), else
# the one its inputs record, back through its lineage (lineage.find_input: only inputs whose manifest
# is the one recorded). A recorded root passes trust.py's rule first (never a filesystem root, a
# system or home folder); a relative one (older manifests) is looked for from the current folder,
# then above the folder that recorded it. A recorded root that is gone is one line, unless the
# folder carries its images (image bytes in its shards, or a packed folder's tars): then no root.


def recorded_root(manifest: Mapping[str, Any], folder: Any = "the folder") -> str | None:
    """The image root a folder's own manifest records, as recorded, through trust.py's rule (one line
    when refused); None when it records none."""
    if not isinstance(manifest, Mapping):
        return None
    options = manifest.get("options")
    root = options.get("image_root") if isinstance(options, Mapping) else None
    if not root:  # score reads each input under its own root: one they all share is the folder's
        roots = {e.get("image_root") for e in manifest.get("inputs") or [] if isinstance(e, Mapping)}
        root = roots.pop() if len(roots) == 1 else None
    if not root:
        return None
    if not isinstance(root, str):
        raise UserError(f"{folder}: its manifest records an image root that is not text; give --image-root")
    return trust.check_recorded_root(root, folder)


def folder_root(
    folder: Any, given: str | os.PathLike | Root | None = None, manifest: Mapping[str, Any] | None = None
) -> Root | None:
    """The image root of one folder by the rule above (given > recorded > lineage), resolved; None
    when none is given or recorded, or when the recorded one is gone and the folder carries its images.
    `manifest`: the folder's, when already read."""
    if given is not None and str(given) != "":
        return resolve_root(given)
    if manifest is None:
        from caption_debias.dataset import read_manifest

        manifest = read_manifest(folder)[1]
    found = _recorded_or_lineage(folder, manifest, 0)
    if found is None:
        return None
    text, where = found
    try:
        return resolve_root(_place(text, where), "the image root")
    except UserError as exc:
        if carries_images(folder, manifest):
            return None  # moved with its images inside: the stored bytes (or tars) are what is read
        raise UserError(f"{exc} (recorded in {where}'s manifest; give --image-root)") from None


def inputs_root(folders: Sequence[Any], given: str | os.PathLike | Root | None = None) -> Root | None:
    """The one image root of several input folders (curate, pack): `given`, else folder_root of each
    (each folder's manifest read first: one that is not there is its own line); inputs whose roots
    differ need one given."""
    from caption_debias.dataset import read_manifest

    manifests = [read_manifest(folder)[1] for folder in folders]
    if given is not None and str(given) != "":
        return resolve_root(given)
    roots: dict[str, Root] = {}
    for folder, manifest in zip(folders, manifests):
        root = folder_root(folder, None, manifest)
        if root is not None:
            roots.setdefault(root.resolved, root)
    if len(roots) > 1:
        raise UserError(f"the inputs were prepared with different image roots ({', '.join(roots)}); give --image-root")
    return next(iter(roots.values()), None)


def _recorded_or_lineage(folder: Any, manifest: Mapping[str, Any], depth: int) -> tuple[str, Any] | None:
    """(the root recorded, the folder whose manifest records it): the folder's own, else its inputs'."""
    own = recorded_root(manifest, folder)
    if own is not None:
        return own, folder
    if depth >= lineage.MAX_DEPTH or lineage.stage_of(manifest) == "prepare":
        return None
    found: dict[str, tuple[str, Any]] = {}
    for entry in lineage.input_entries(dict(manifest)):
        place, inner, _ = lineage.find_input(entry, folder)
        got = None if place is None else _recorded_or_lineage(place, inner, depth + 1)
        if got is not None:
            found.setdefault(got[0], got)
    if len(found) > 1:
        raise UserError(f"{folder}: its inputs record different image roots ({', '.join(found)}); give --image-root")
    return next(iter(found.values()), None)


def _place(recorded: str, where: Any) -> str:
    """A recorded root as a place here: a URL or an absolute path as it is; a relative one (an older
    manifest) from the current folder, else under a folder above the one that recorded it."""
    if storage.is_url(recorded) or os.path.isabs(recorded):
        return recorded
    for place in lineage.candidates(recorded, where):
        if os.path.isdir(place):
            return trust.check_recorded_root(str(place), where)
    return recorded


def carries_images(folder: Any, manifest: Mapping[str, Any]) -> bool:
    """Whether a folder holds its images itself: a packed folder (its tars), or one whose first
    non-empty shard stores image bytes (curate --embed-images); a folder with no rows needs none."""
    from caption_debias.dataset import inside

    if lineage.stage_of(manifest) == "pack":
        return True
    shards = [s for s in manifest.get("shards") or [] if isinstance(s, Mapping) and s.get("rows")]
    if not shards:
        return True
    try:
        path = inside(storage.as_path(folder), shards[0].get("path"), "shard")
        if "image_bytes" not in storage.parquet_file(path).schema_arrow.names:
            return False
        column = storage.read_table(path, columns=["image_bytes"]).column("image_bytes")
    except (OSError, ValueError, UserError):
        return False  # an unreadable shard is its reader's one line, later
    return column.null_count < len(column)
