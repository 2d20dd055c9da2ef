"""The one gate between the web app and the file system: is a path inside a root, and a bounded read.

Every image the viewer sends (thumbnails and the "open the image" link) goes through
`resolve_inside` and `read_bounded`; nothing else in the viewer opens a user path. A root-level
helper shared by other commands may replace these two functions later (same contract).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_IMAGE_BYTES = 64 << 20  # a larger "image" is not shown (and never read whole)


class Refused(Exception):
    """A path the viewer will not read: why, in a few words (shown on the placeholder)."""


def resolve_inside(root: str | Path, relative: str) -> Path:
    """`root/relative` with symlinks resolved, if it stays inside the resolved root; else Refused.

    Absolute paths, `..` that climbs out and symlinks that point out are refused alike.
    """
    if not relative or "\x00" in relative or "://" in relative:
        raise Refused("not a path under the image root")
    base = Path(root).resolve()
    if Path(relative).is_absolute():
        raise Refused("absolute path")
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        raise Refused("outside the image root")
    return target


def read_bounded(path: Path, limit: int = MAX_IMAGE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. Never blocks on a FIFO or device:
    the file is opened non-blocking and checked with fstat on the open descriptor (no race with a swap)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise Refused("image not found") from None
    except OSError as exc:
        raise Refused(f"unreadable ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_size > limit:
            raise Refused(f"larger than {limit >> 20} MiB")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise Refused(f"larger than {limit >> 20} MiB")
        return data
    finally:
        os.close(fd)


def read_inside(root: str | Path, relative: str, limit: int = MAX_IMAGE_BYTES) -> bytes:
    """resolve_inside + read_bounded: the bytes of `root/relative`, or Refused."""
    return read_bounded(resolve_inside(root, relative), limit)
