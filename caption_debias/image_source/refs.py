"""What a row's `image` names, read from its text alone.

- `path/to/x.jpg`: a file under the root;
- `SHARD.tar#MEMBER`: a member of a tar under the root (img2dataset's webdataset output, pack's tars);
- `SHARD.parquet#KEY`: the sample KEY of img2dataset's parquet output (image bytes in the file);
- a URL (`https://...`, `file://...`): found through img2dataset's output under the root by the
  row's key (downloads.py);
- `SHARD.tfrecord#KEY` (img2dataset's tfrecord output) is named, and refused in one line.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from caption_debias import storage
from caption_debias.image_files import UNREADABLE, ImageProblem, control_character, path_problem

FILE, TAR, PARQUET, URL = "file", "tar", "parquet", "url"
# img2dataset's encode formats: SHARD.tar#KEY.jpg also finds KEY.png, KEY.webp, KEY.jpeg
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
_CONTAINER = re.compile(r"^(.*?\.(tar|parquet|tfrecord))#(.*)$", re.DOTALL)


@dataclass(frozen=True)
class Ref:
    kind: str  # FILE, TAR, PARQUET or URL
    path: str  # the file, tar or parquet file relative to the root (normalized); the URL itself
    member: str = ""  # the tar member (normalized) or the parquet sample's key

    def __str__(self) -> str:
        return f"{self.path}#{self.member}" if self.member else self.path


def parse(image: object) -> Ref:
    """The Ref of a row's `image`, or ImageProblem(UNREADABLE) when no root can hold it."""
    if not isinstance(image, str):
        raise ImageProblem(UNREADABLE, f"image path is {type(image).__name__}, not text")
    if storage.is_url(image):
        return Ref(URL, image)
    m = _CONTAINER.match(image)
    if m is None:
        return Ref(FILE, _relative(image, image))
    path, ext, member = m.group(1), m.group(2), m.group(3)
    if ext == "tfrecord":
        raise ImageProblem(
            UNREADABLE,
            f"{image}: img2dataset's tfrecord output is not read; download with webdataset or parquet output",
        )
    if not member:
        raise ImageProblem(UNREADABLE, f"{image}: nothing named after '#'")
    path = _relative(path, image)
    if ext == "parquet":
        where = control_character(member)
        if where is not None:
            raise ImageProblem(UNREADABLE, f"control character in sample key: {where}")
        return Ref(PARQUET, path, member)
    problem = path_problem(member)
    if problem is not None:
        problem = problem.replace("image path", "member path").replace("the image root", "its tar")
        raise ImageProblem(UNREADABLE, f"{path}#{member}: {problem}")
    return Ref(TAR, path, member_name(member))


def _relative(path: str, image: str) -> str:
    problem = path_problem(path)
    if problem is not None:
        raise ImageProblem(UNREADABLE, problem if path == image else f"{image}: {problem}")
    return path


def member_name(name: str) -> str:
    """A tar member's name as it is matched: './a//b.jpg' and 'a/b.jpg' are one member."""
    return posixpath.normpath(name.replace("\\", "/")) if name else name


def candidates(member: str) -> tuple[str, ...]:
    """The member names that satisfy a `SHARD.tar#member` reference, in no order of preference:
    the name itself and, for an image extension, the same stem with img2dataset's other ones."""
    stem, dot, ext = member.rpartition(".")
    if not dot or ext.lower() not in IMAGE_EXTS:
        return (member,)
    return (member,) + tuple(f"{stem}.{e}" for e in IMAGE_EXTS if e != ext.lower())


def container(ref: Ref) -> str | None:
    """The tar or parquet file a Ref reads from (what tasks split by), None for a loose file."""
    return ref.path if ref.kind in (TAR, PARQUET) else None
