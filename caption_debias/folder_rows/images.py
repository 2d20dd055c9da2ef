"""Where a row's picture comes from: the one place the viewer turns a row into image bytes.

`source_for` gives a row's ImageBytes: `Embedded` (the row's `image_bytes`), `RootFile` (a
path under a local image root, read through the file gate: folder_rows/files.py over
caption_debias/image_files.py), `Stored` (anywhere else caption_debias.image_source reads: a
member `SHARD.tar#MEMBER`, a sample `SHARD.parquet#KEY`, a URL row's download in img2dataset's
output under the root, any file under a root on a store such as s3://) or `NoImage` (why there is
none, shown on the placeholder). Thumbnails (folder_rows/thumbs.py) and the original image route
(view/app.py) only call a source's `cache_name`, `size` and `open`; a new kind of place to read
from is a new source class here and a branch in `source_for`.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Protocol

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.folder_rows.files import Refused, resolve_inside
from caption_debias.image_files import MAX_FILE_BYTES, MISSING, ImageProblem, open_regular
from caption_debias.image_source import refs


class ImageBytes(Protocol):
    def cache_name(self) -> str:
        """A name that changes whenever the bytes may have (the thumbnail cache's key); Refused if none."""

    def size(self) -> int:
        """The number of bytes `open` reads; Refused when there is nothing to read."""

    def open(self) -> BinaryIO:
        """A binary file object on the image's bytes (bounded, never blocking); Refused when it cannot be."""


@dataclass(frozen=True)
class NoImage:
    why: str

    def cache_name(self) -> str:
        raise Refused(self.why)

    def size(self) -> int:
        raise Refused(self.why)

    def open(self) -> BinaryIO:
        raise Refused(self.why)


@dataclass(frozen=True)
class Embedded:
    data: bytes

    def cache_name(self) -> str:
        return hashlib.sha1(self.data).hexdigest()

    def size(self) -> int:
        return len(self.data)

    def open(self) -> BinaryIO:
        return io.BytesIO(self.data)


@dataclass(frozen=True)
class RootFile:
    """A path relative to an image root; resolved (symlinks followed, inside the root) at each use."""

    root: Path
    relative: str

    def _target(self) -> tuple[Path, int, int]:
        target = resolve_inside(self.root, self.relative)
        try:
            st = target.stat()
        except OSError:
            raise Refused("image not found") from None
        return target, st.st_size, st.st_mtime_ns

    def cache_name(self) -> str:
        target, size, mtime = self._target()
        return hashlib.sha1(f"{target}|{size}|{mtime}".encode()).hexdigest()

    def size(self) -> int:
        return self._target()[1]

    def open(self) -> BinaryIO:
        target = self._target()[0]
        try:
            return open_regular(target, MAX_FILE_BYTES, name=Path(self.relative).name)
        except ImageProblem as why:
            raise Refused.of(why) from None


NOT_DOWNLOADED = "image is a URL, not downloaded under the image root"


def _refused(why: ImageProblem, image: str) -> Refused:
    if why.reason == MISSING and storage.is_url(image):
        return Refused(NOT_DOWNLOADED)
    return Refused.of(why)


@dataclass(frozen=True)
class Stored:
    """A row's image read through caption_debias.image_source (image_source/lookup.py: a tar's
    members indexed once, each member one seek and one read; a file on a store one GET), into memory
    (at most image_files.MAX_FILE_BYTES) when a thumbnail or the original is asked for."""

    images: Any  # image_source.lookup.ImageLookup
    image: str
    key: str | None = None

    def cache_name(self) -> str:
        try:
            return self.images.image_version(self.image, self.key)
        except ImageProblem as why:
            raise _refused(why, self.image) from None

    def _bytes(self) -> bytes:
        try:
            return self.images.read(self.image, self.key)
        except ImageProblem as why:
            raise _refused(why, self.image) from None

    def size(self) -> int:
        return len(self._bytes())

    def open(self) -> BinaryIO:
        return io.BytesIO(self._bytes())


def source_for(
    image_root: Path | str | None,
    image: str | None,
    embedded: bytes | None,
    images: Callable[[], Any] | None = None,
    key: str | None = None,
) -> ImageBytes:
    """The source of a row's picture: its embedded bytes first, else its image under the image root:
    a file under a local root through the file gate (RootFile), anything else through the image
    source (`images()`: the folder's ImageLookup, made on first need)."""
    if embedded:
        return Embedded(embedded)
    if not image:
        return NoImage("no image")
    if image_root is None:
        return NoImage("image is a URL" if storage.is_url(image) else "no --image-root")
    try:
        kind = refs.parse(image).kind
    except ImageProblem as why:
        return NoImage(str(Refused.of(why)))
    if kind == refs.FILE and not storage.is_remote(image_root):
        return RootFile(Path(image_root), image)
    if images is None:
        return NoImage("image is a URL" if kind == refs.URL else "not a file under the image root")
    try:
        return Stored(images(), image, key)
    except UserError as exc:  # the root cannot be listed (a store that does not answer)
        return NoImage(str(exc))
