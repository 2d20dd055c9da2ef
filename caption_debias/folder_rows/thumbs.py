"""Thumbnails: a small JPEG per image, made once on demand and cached outside the user's folders.

The cache lives under $XDG_CACHE_HOME/caption-debias/thumbs (~/.cache/...) unless a folder is
given; an entry is named by its source's `cache_name` (a file's resolved path, size and mtime, an
embedded image's sha1), so an edited image gets a new thumbnail and nothing is ever written next
to the data.

Memory: a thumbnail is decoded as image_files.thumbnail_of decodes it (a JPEG at draft scale,
anything else reduced before it is converted), one decode per image at a time (a page of 48 rows
that share one picture decodes it once; the other requests wait for it), and every decode holds a
share of one `DecodeBudget` for the whole server: what the decode will hold (image_files.
decoded_bytes, from the header) is reserved before it starts, and a decode waits while the others
hold the budget. A picture larger than the whole budget is decoded when no other decode runs.
"""

from __future__ import annotations

import io
import os
import tempfile
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

from caption_debias.folder_rows.files import Refused
from caption_debias.folder_rows.images import Embedded, ImageBytes, RootFile

SIZE = 256  # longer side in pixels
QUALITY = 80
DECODE_BUDGET = 640 * 1024 * 1024  # bytes all thumbnail decodes of a server may hold at once


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "caption-debias" / "thumbs"


class DecodeBudget:
    """A semaphore counted in bytes: `hold(n)` waits until n more bytes fit (or nothing else is held)."""

    def __init__(self, limit: int = DECODE_BUDGET):
        self.limit, self.held, self.peak = limit, 0, 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, n: int):
        with self._cond:
            self._cond.wait_for(lambda: self.held == 0 or self.held + n <= self.limit)
            self.held += n
            self.peak = max(self.peak, self.held)
        try:
            yield
        finally:
            with self._cond:
                self.held -= n
                self._cond.notify_all()


def _jpeg(im) -> bytes:
    out = io.BytesIO()
    im.save(out, "JPEG", quality=QUALITY, optimize=True)
    return out.getvalue()


def _thumbnail(source: ImageBytes, budget: DecodeBudget, size: int = SIZE) -> bytes:
    """JPEG bytes of a source's picture fitted into size x size, decoded as every stage decodes it
    (image_files.thumbnail_of: 16-bit scaled, transparency on white), read from its file object (a
    file is not read into memory whole) within the budget: the header says what the decode will hold
    before any pixel is decoded."""
    from caption_debias.image_files import ImageProblem, decoded_bytes, decoding, draft, open_image, thumbnail_of

    try:
        with source.open() as fh, decoding(None):
            im = draft(open_image(fh), size)
            with budget.hold(decoded_bytes(im)):
                return _jpeg(thumbnail_of(im, size))
    except ImageProblem as exc:
        raise Refused("not a readable image") from exc


def placeholder_svg(why: str) -> bytes:
    """A grey tile saying why there is no picture (a long reason wrapped on up to three lines)."""
    import textwrap
    from html import escape

    lines = textwrap.wrap(why, 34, max_lines=3, placeholder=" ...") or [""]
    size = 14 if len(lines) == 1 else 11
    spans = "".join(
        f'<tspan x="128" dy="{0 if i == 0 else size + 2}">{escape(line)}</tspan>' for i, line in enumerate(lines)
    )
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="256" height="192" viewBox="0 0 256 192">'
        f"<title>{escape(why)}</title>"
        '<rect width="256" height="192" fill="#e9ecef"/>'
        '<path d="M98 120l22-28 16 20 12-14 18 22z" fill="#b8bec6"/><circle cx="150" cy="78" r="9" fill="#b8bec6"/>'
        f'<text x="128" y="150" font-family="sans-serif" font-size="{size}" fill="#5b6470" text-anchor="middle">{spans}</text>'
        "</svg>"
    ).encode("utf-8")


class ThumbCache:
    def __init__(self, folder: str | Path | None = None, budget: DecodeBudget | None = None):
        self.folder = Path(folder) if folder else default_cache_dir()
        self.budget = budget or DecodeBudget()
        self._lock = threading.Lock()
        self._making: dict[str, Future] = {}  # cache name -> the decode in progress

    def _path(self, name: str) -> Path:
        return self.folder / name[:2] / f"{name}.jpg"

    def _store(self, path: Path, jpeg: bytes) -> None:
        try:  # write-then-rename: a reader never sees half a file
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(jpeg)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache only costs speed

    def for_source(self, source: ImageBytes) -> bytes:
        """The thumbnail of an image source (folder_rows/images.py); Refused when there is no picture to show.
        Concurrent requests for one picture share one decode."""
        name = source.cache_name()
        path = self._path(name)
        try:
            return path.read_bytes()
        except OSError:
            pass
        with self._lock:
            making = self._making.get(name)
            mine = making is None
            if making is None:
                making = self._making[name] = Future()
        if not mine:
            return making.result()  # the decode's thumbnail, or its Refused
        try:
            jpeg = _thumbnail(source, self.budget)
            self._store(path, jpeg)
            making.set_result(jpeg)
            return jpeg
        except BaseException as exc:
            making.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._making[name]

    def for_file(self, root: str | Path, relative: str) -> bytes:
        return self.for_source(RootFile(Path(root), relative))

    def for_bytes(self, data: bytes) -> bytes:
        return self.for_source(Embedded(data))
