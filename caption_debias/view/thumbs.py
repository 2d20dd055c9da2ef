"""Thumbnails: a small JPEG per image, made once on demand and cached outside the user's folders.

The cache lives under $XDG_CACHE_HOME/caption-debias/thumbs (~/.cache/...) unless a folder is
given; a file's entry is named by its resolved path, size and mtime, an embedded image's by its
sha1, so an edited image gets a new thumbnail and nothing is ever written next to the data.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from pathlib import Path

from caption_debias.view.files import Refused, read_bounded, resolve_inside

SIZE = 256  # longer side in pixels
QUALITY = 80


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "caption-debias" / "thumbs"


def make_thumbnail(data: bytes, size: int = SIZE) -> bytes:
    """JPEG bytes of `data` scaled to fit size x size, decoded as every stage decodes it
    (image_files.decode_thumbnail: 16-bit scaled, transparency on white, JPEGs at draft scale)."""
    from caption_debias.image_files import ImageProblem, decode_thumbnail

    try:
        im = decode_thumbnail(data, size)
    except ImageProblem as exc:  # shown as a placeholder, never a crash
        raise Refused("not a readable image") from exc
    out = io.BytesIO()
    im.save(out, "JPEG", quality=QUALITY, optimize=True)
    return out.getvalue()


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
    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder) if folder else default_cache_dir()

    def _path(self, name: str) -> Path:
        return self.folder / name[:2] / f"{name}.jpg"

    def _get_or_make(self, name: str, load) -> bytes:
        path = self._path(name)
        try:
            return path.read_bytes()
        except OSError:
            pass
        jpeg = make_thumbnail(load())
        try:  # write-then-rename: a reader never sees half a file
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(jpeg)
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache only costs speed
        return jpeg

    def for_file(self, root: str | Path, relative: str) -> bytes:
        target = resolve_inside(root, relative)
        try:
            st = target.stat()
        except OSError:
            raise Refused("image not found") from None
        name = hashlib.sha1(f"{target}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
        return self._get_or_make(name, lambda: read_bounded(target))

    def for_source(self, source: tuple) -> bytes:
        """The thumbnail of a ViewData.image_source: ("bytes", data), ("file", root, path) or
        ("none", why); Refused when there is no picture to show."""
        if source[0] == "bytes":
            return self.for_bytes(source[1])
        if source[0] == "file":
            return self.for_file(source[1], source[2])
        raise Refused(source[1])

    def for_bytes(self, data: bytes) -> bytes:
        return self._get_or_make(hashlib.sha1(data).hexdigest(), lambda: data)
