"""Members of one tar, read in a single pass in member order.

Python's tarfile over a seekable, buffered reader (a local file, or an object fetched by ranges):
members nobody asked for are skipped within the buffer, and the pass stops after the last
member asked for. Each member asked for is read through image_files.read_member (regular
members, the size cap). What tarfile does not bound is bounded here: extended headers (pax, GNU
long names) are refused above MAX_HEADER_BYTES before tarfile reads them into memory, and the
headers tarfile keeps of every member seen are dropped as the pass goes.

Rules (the row-by-row reference `read_one` keeps the same ones):
- a reference `SHARD.tar#KEY.jpg` is satisfied by the first member, in tar order, named KEY.jpg
  or KEY with another image extension (refs.candidates; img2dataset's encode_format);
- a link member is followed inside its tar (tarfile's own rule for each hop), through at most
  MAX_LINK_HOPS links; a link whose target leaves the tar, a loop and a longer chain are refused
  (that row's reason; the tar's other members still read);
- a tar that ends without its end-of-archive blocks is truncated: members after the cut are
  `image_unreadable`; a whole tar without the member is `image_missing`.
"""

from __future__ import annotations

import posixpath
import tarfile
from typing import Iterator

from caption_debias.image_files import MISSING, UNREADABLE, ImageProblem, read_member
from caption_debias.image_source.refs import candidates, member_name

MAX_HEADER_BYTES = 1 << 20  # a pax header or GNU long name beyond 1 MiB is not a real tar's
MAX_LINK_HOPS = 8  # a link to a link ... to a file: a longer chain is a loop or hostile
_EXTENDED = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)
_BLOCK = tarfile.BLOCKSIZE


class BoundedTarInfo(tarfile.TarInfo):
    """tarfile reads an extended header whole into memory: one whose size field claims
    gigabytes is refused first (tarfile turns this error into ReadError)."""

    def _proc_member(self, tar):
        if self.type in _EXTENDED and self.size > MAX_HEADER_BYTES:
            raise tarfile.SubsequentHeaderError(f"an extended header of {self.size:,} bytes at byte {self.offset:,}")
        return super()._proc_member(tar)


def open_tar(fh, name: str) -> tarfile.TarFile:
    """tarfile over a seekable binary reader, uncompressed; ImageProblem(UNREADABLE) when it is no tar."""
    try:
        return tarfile.open(fileobj=fh, mode="r:", tarinfo=BoundedTarInfo)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ImageProblem(UNREADABLE, f"{name}: not a readable tar ({exc})") from None


def next_member(tar: tarfile.TarFile, name: str, last: str | None) -> tarfile.TarInfo | None:
    try:
        info = tar.next()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ImageProblem(UNREADABLE, f"{name}: unreadable after {_after(last)} ({exc})") from None
    del tar.members[:]  # type: ignore[attr-defined]  # tarfile keeps every header for getmember; a single pass needs none of them
    if info is None and not _ended_cleanly(tar):
        raise ImageProblem(UNREADABLE, f"{name}: truncated or corrupt after {_after(last)}")
    return info


def _after(last: str | None) -> str:
    return f"member {last}" if last else "its start"


def _ended_cleanly(tar: tarfile.TarFile) -> bool:
    """Whether the archive ends with a zero block where tarfile stopped (a truncated tar does not)."""
    tar.fileobj.seek(tar.offset)
    block = tar.fileobj.read(_BLOCK)
    return len(block) == _BLOCK and block.count(0) == _BLOCK


def link_outside(info: tarfile.TarInfo) -> str | None:
    """The target of a link member when it leaves the tar, else None."""
    if not (info.issym() or info.islnk()):
        return None
    target = info.linkname
    if info.issym() and not target.startswith("/"):
        target = posixpath.join(posixpath.dirname(info.name), target)
    norm = posixpath.normpath(target)
    return info.linkname if target.startswith("/") or norm == ".." or norm.startswith("../") else None


def link_target(tar: tarfile.TarFile, info: tarfile.TarInfo, name: str) -> tarfile.TarInfo:
    """The member a link member ends at, hop by hop (tarfile's own rule for each, which would
    recurse without end on a loop); ImageProblem for a link out, a loop or a chain too long."""
    seen = {info.offset}
    for _ in range(MAX_LINK_HOPS + 1):
        if not (info.issym() or info.islnk()):
            return info
        outside = link_outside(info)
        if outside is not None:
            raise ImageProblem(UNREADABLE, f"{name} is a link to {outside}, outside its tar")
        try:
            info = tar._find_link_target(info)  # type: ignore[attr-defined]
        except KeyError:
            raise ImageProblem(UNREADABLE, f"{name} is a link to {info.linkname}, no member of its tar") from None
        if info.offset in seen:
            raise ImageProblem(UNREADABLE, f"{name} is a link in a loop of links")
        seen.add(info.offset)
    raise ImageProblem(UNREADABLE, f"{name} is a chain of more than {MAX_LINK_HOPS} links")


def _member_bytes(tar: tarfile.TarFile, info: tarfile.TarInfo, name: str) -> bytes:
    try:
        return read_member(tar, link_target(tar, info, name), name)
    except tarfile.TarError as exc:  # the member's data runs past the end of the file
        raise ImageProblem(UNREADABLE, f"{name}: truncated tar ({exc})") from None


def stream(fh, name: str, members: list[str]) -> Iterator[tuple[str, bytes | ImageProblem]]:
    """(member asked for, its bytes or ImageProblem) for every name in `members`, in tar order
    (names never found last). `fh` is read once, front to back. A link member to another member
    comes back as LinkInside, for the caller to read with `read_one` (tarfile needs the index)."""
    wanted: dict[str, list[str]] = {}
    for m in members:
        for c in candidates(m):
            wanted.setdefault(c, []).append(m)
    left = dict.fromkeys(members)  # asked and not yet found, in the order asked
    try:
        tar = open_tar(fh, name)
        last = None
        while left:
            info = next_member(tar, name, last)
            if info is None:
                break
            last = info.name
            asked = [m for m in wanted.get(member_name(info.name), ()) if m in left]
            if not asked:
                continue
            for m in asked:
                del left[m]
            found = _found(tar, info, name)
            for m in asked:
                yield m, found
    except ImageProblem as exc:
        for m in left:
            yield m, exc
        return
    for m in left:
        yield m, ImageProblem(MISSING, f"no member {m} in {name}")


def _found(tar: tarfile.TarFile, info: tarfile.TarInfo, name: str) -> bytes | ImageProblem:
    if (info.issym() or info.islnk()) and link_outside(info) is None:
        return LinkInside(name, info.name)
    try:
        return _member_bytes(tar, info, f"{name}#{info.name}")
    except ImageProblem as exc:
        return exc


class LinkInside(ImageProblem):
    """A link member to another member: read by `read_links` (tarfile resolves it from the whole index)."""

    def __init__(self, tar_name: str, member: str):
        super().__init__(UNREADABLE, f"{tar_name}#{member} is a link member")
        self.member = member


def read_one(fh, name: str, member: str) -> bytes:
    """Specification: the bytes of one member (the first in tar order named as `candidates`
    says), or ImageProblem; the tar opened for this member alone."""
    names = set(candidates(member))
    tar = open_tar(fh, name)
    last = None
    while True:
        info = next_member(tar, name, last)
        if info is None:
            raise ImageProblem(MISSING, f"no member {member} in {name}")
        last = info.name
        if member_name(info.name) in names:
            if (info.issym() or info.islnk()) and link_outside(info) is None:
                return _linked(fh, name, info)
            return _member_bytes(tar, info, f"{name}#{info.name}")


def _linked(fh, name: str, link: tarfile.TarInfo) -> bytes:
    target = read_links(fh, name, [link.name])[link.name]
    if isinstance(target, ImageProblem):
        raise target  # as _member_bytes: the specification raises a row's problem
    return target


def read_links(fh, name: str, links: list[str]) -> dict[str, bytes | ImageProblem]:
    """The targets' bytes of link members inside the tar (by tarfile's own resolution over the
    whole index, as image_files.read_member does); the tar opened once for all of them."""
    fh.seek(0)
    try:
        tar = open_tar(fh, name)
        tar.getmembers()
    except (ImageProblem, tarfile.TarError, OSError) as exc:
        problem = exc if isinstance(exc, ImageProblem) else ImageProblem(UNREADABLE, f"{name}: unreadable ({exc})")
        return dict.fromkeys(links, problem)
    out: dict[str, bytes | ImageProblem] = {}
    for link in links:
        try:
            out[link] = _member_bytes(tar, tar.getmember(link), f"{name}#{link}")
        except ImageProblem as exc:
            out[link] = exc
        except (tarfile.TarError, OSError, KeyError) as exc:
            out[link] = ImageProblem(UNREADABLE, f"{name}#{link}: {exc}")
    return out


class MemberIndex:
    """One tar's member headers, read in one pass (`index`): the first header of every member name,
    and the fault that ended the pass early (a truncated tar), if one did."""

    def __init__(self, name: str):
        self.name = name
        self.first: dict[str, tarfile.TarInfo] = {}
        self.problem: ImageProblem | None = None

    def find(self, member: str) -> tarfile.TarInfo:
        """The header `read_one` would read for `member` (the first in tar order of its candidates), or ImageProblem."""
        hits = [self.first[c] for c in candidates(member) if c in self.first]
        if hits:
            return min(hits, key=lambda info: info.offset)
        raise self.problem or ImageProblem(MISSING, f"no member {member} in {self.name}")


def index(fh, name: str) -> MemberIndex:
    """Every member header of the tar on `fh`, in one pass front to back (data skipped within the buffer)."""
    found = MemberIndex(name)
    try:
        tar = open_tar(fh, name)
        last = None
        while (info := next_member(tar, name, last)) is not None:
            last = info.name
            found.first.setdefault(member_name(info.name), info)
    except ImageProblem as exc:
        found.problem = exc
    return found


def read_indexed(tar: tarfile.TarFile, found: MemberIndex, member: str) -> bytes:
    """The bytes of `member` by its indexed header: one seek and one read on `tar` (open_tar of the
    same file, kept open), the same bytes and problems as `read_one`."""
    info = found.find(member)
    if (info.issym() or info.islnk()) and link_outside(info) is None:
        data = _linked(tar.fileobj, found.name, info)
        if isinstance(data, ImageProblem):
            raise data
        return data
    return _member_bytes(tar, info, f"{found.name}#{info.name}")
