"""The viewer's gate to the file system: the image root boundary of `caption_debias.image_files`
(the rule every stage shares), with its faults as `Refused`.

Every image the viewer sends (thumbnails and the "open the image file" route) is a path resolved
here and opened by image_files.open_regular (folder_rows/images.py RootFile); nothing else in the viewer
opens a user path. A refusal says why in words a web page may show: never where a symlink points.
"""

from __future__ import annotations

from pathlib import Path

from caption_debias.image_files import MISSING, ImageProblem, ImageRoot


class Refused(Exception):
    """A path the viewer will not read: why, in a few words (shown on the placeholder)."""

    @classmethod
    def of(cls, why: ImageProblem) -> "Refused":
        return cls("image not found" if why.reason == MISSING else why.detail)


def resolve_inside(root: str | Path, relative: str) -> Path:
    """`root/relative` with symlinks resolved, if it is a file inside the resolved root; else Refused.

    Absolute paths, `..` that climbs out, control characters and symlinks that point out are refused alike.
    """
    try:
        return ImageRoot(root).resolve(relative)
    except ImageProblem as why:
        raise Refused.of(why) from None
