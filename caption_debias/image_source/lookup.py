"""One image at a time, by row: the random access of view's thumbnails, train's rows drawn by
index and eval's pairs, over an ImageSource.

A tar is indexed the first time one of its members is asked for (its member headers, in one pass:
tars.index) and kept open; every member after that is one seek and one read, so no tar is
scanned or reopened per row. A process keeps at most MAX_TARS tars (least recently used out);
a copy sent to another process (pickle: DataLoader workers, Ray) starts with none. Loose files,
parquet samples and URL rows are read as ImageSource.read reads them. The results are
ImageSource.read's, byte for byte, problem for problem (tests/test_image_lookup.py).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, cast

from caption_debias.image_files import ImageProblem
from caption_debias.image_source import refs, tars
from caption_debias.image_source.roots import Root
from caption_debias.image_source.source import ImageSource

MAX_TARS = 64  # open tars a process keeps (one file handle and one header per member each)
MEMBER_BUFFER = 1 << 16  # a member is read by its offset: a remote read fetches the member, not 8 MiB


class _OpenTar:
    def __init__(self, found: tars.MemberIndex, fh):
        self.found, self.fh = found, fh
        self.tar = None if found.problem is not None and not found.first else tars.open_tar(fh, found.name)
        self.lock = threading.Lock()  # one reader on a file position at a time


class ImageLookup:
    """Single images under one root (see the module docs); thread-safe."""

    def __init__(self, source: ImageSource | str | Root, max_tars: int = MAX_TARS, member_buffer: int = MEMBER_BUFFER):
        self._setup(source if isinstance(source, ImageSource) else ImageSource(source), max_tars, member_buffer)

    def _setup(self, source: ImageSource, max_tars: int, member_buffer: int) -> None:
        self.source = source
        self.max_tars, self.member_buffer = max_tars, member_buffer
        self._tars: OrderedDict[str, _OpenTar] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def root(self) -> Root:
        return self.source.root

    def __getstate__(self) -> dict[str, Any]:  # each process indexes and opens its own tars
        return {"source": self.source, "max_tars": self.max_tars, "member_buffer": self.member_buffer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(state["source"], state["max_tars"], state["member_buffer"])

    def read(self, image: object, key: object = None) -> bytes:
        """A row's image bytes, or its ImageProblem (ImageSource.read's, without a scan per row)."""
        ref = self.source.locate(image, key)
        if ref.kind != refs.TAR:
            return self.source.read(str(ref))
        entry = self._tar(ref.path)
        with entry.lock:
            if entry.tar is None:  # not a readable tar: its one problem
                raise cast(ImageProblem, entry.found.problem)
            return tars.read_indexed(entry.tar, entry.found, ref.member)

    def image_version(self, image: object, key: object = None) -> str:
        """What changes when a row's image bytes may have: the holding file's size and modification
        time (an object's ETag on a store) with the member's name; ImageProblem when there is none."""
        ref = self.source.locate(image, key)
        held = self.source._files.file_version(ref.path)
        return hashlib.sha1(f"{self.root.resolved}|{ref}|{held}".encode()).hexdigest()

    def _tar(self, path: str) -> _OpenTar:
        with self._lock:
            entry = self._tars.get(path)
            if entry is not None:
                self._tars.move_to_end(path)
                return entry
        entry = self._index(path)
        with self._lock:
            if path in self._tars:  # another thread indexed it meanwhile: keep the first
                entry.fh.close()
                return self._tars[path]
            self._tars[path] = entry
            while len(self._tars) > self.max_tars:
                self._tars.popitem(last=False)[1].fh.close()
        return entry

    def _index(self, path: str) -> _OpenTar:
        files = self.source._files
        with files.open(path) as fh:  # the header pass: sequential, in large reads
            found = tars.index(fh, path)
        self.source.stats.opened[path] += 1
        fh = files.open(path, buffer_size=self.member_buffer)
        try:
            return _OpenTar(found, fh)
        except BaseException:
            fh.close()
            raise

    def close(self) -> None:
        with self._lock:
            for entry in self._tars.values():
                entry.fh.close()
            self._tars.clear()
