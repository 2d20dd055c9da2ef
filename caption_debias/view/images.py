"""Where a row's picture comes from: the one place the viewer turns a row into image bytes.

`source_for` gives an ImageSource for a row: `Embedded` (the row's `image_bytes`), `RootFile` (a
path under the folder's image root, read through the file gate: view/files.py over
caption_debias/image_files.py) or `NoImage` (why there is none, shown on the placeholder).
Thumbnails (view/thumbs.py) and the original image route (view/app.py) only call a source's
`cache_name`, `size` and `open`; a new kind of place to read from (a member of a tar, an object in
a bucket) is a new source class here and a branch in `source_for`.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from caption_debias import storage
from caption_debias.image_files import MAX_FILE_BYTES, ImageProblem, open_regular
from caption_debias.view.files import Refused, resolve_inside


class ImageSource(Protocol):
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


def source_for(image_root: Path | None, image: str | None, embedded: bytes | None) -> ImageSource:
    """The source of a row's picture: its embedded bytes first, else its path under the image root."""
    if embedded:
        return Embedded(embedded)
    if not image:
        return NoImage("no image")
    if storage.is_url(image):
        return NoImage("image is a URL")
    if image_root is None:
        return NoImage("no --image-root")
    return RootFile(Path(image_root), image)
