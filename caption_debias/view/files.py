"""The viewer's gate to the file system: the image root boundary and bounded reads of
`caption_debias.image_files` (the rule every stage shares), with its faults as `Refused`.

Every image the viewer sends (thumbnails and the "open the image" link) goes through
`resolve_inside` and `read_bounded`; nothing else in the viewer opens a user path.
"""

from __future__ import annotations

from pathlib import Path

from caption_debias.image_files import MAX_FILE_BYTES, MISSING, ImageProblem, ImageRoot, read_regular

MAX_IMAGE_BYTES = MAX_FILE_BYTES


class Refused(Exception):
    """A path the viewer will not read: why, in a few words (shown on the placeholder)."""

    @classmethod
    def of(cls, why: ImageProblem) -> "Refused":
        return cls("image not found" if why.reason == MISSING else why.shown)


def resolve_inside(root: str | Path, relative: str) -> Path:
    """`root/relative` with symlinks resolved, if it is a file inside the resolved root; else Refused.

    Absolute paths, `..` that climbs out, control characters and symlinks that point out are refused alike.
    """
    try:
        return ImageRoot(root).resolve(relative)
    except ImageProblem as why:
        raise Refused.of(why) from None


def read_bounded(path: Path, limit: int = MAX_IMAGE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; never blocks on a FIFO or device."""
    try:
        return read_regular(path, limit, name=path.name)
    except ImageProblem as why:
        raise Refused.of(why) from None


def read_inside(root: str | Path, relative: str, limit: int = MAX_IMAGE_BYTES) -> bytes:
    """resolve_inside + read_bounded: the bytes of `root/relative`, or Refused."""
    return read_bounded(resolve_inside(root, relative), limit)
