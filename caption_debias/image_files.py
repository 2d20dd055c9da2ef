"""Image files as every stage opens them: the image root is a boundary, reads are bounded, one decode to RGB.

curate, score, pack, train, eval and probe all read image files named by a dataset's `image`
column, which an edited or foreign folder may fill with anything. Here, and only here:

- `ImageRoot.resolve`: whether a relative path stays inside the image root once symlinks are
  resolved (no `..` climb, no absolute path, no control characters, no symlink out, no loop);
- `read_regular`: the bytes of a regular file, at most MAX_FILE_BYTES, without ever blocking on
  a FIFO, socket or device (checked by stat before opening, and by fstat on the opened file);
- `open_image`: Pillow's lazy open with the one MAX_PIXELS rule (the decompression-bomb limit);
- `decode_8bit` / `decode_rgb`: 8-bit grey or RGB (pack) and RGB (train, eval) as Pillow's own
  conversions give it, with EXIF orientation applied, high bit depth scaled (not clipped) and
  transparency composited onto white (`to_8bit`, which curate's hashes and thumbnails use too);
- `decode_thumbnail`: the same picture fitted into a small square (view), decoded with the least
  memory the format allows: a JPEG at libjpeg's DCT scale, anything else reduced before it is
  converted; `decoded_bytes` says beforehand what the full decode holds (view's memory bound).

Nothing else in the toolkit calls Pillow's `Image.open` (tests/test_image_gate.py checks).

The checks guard against mistakes and untrusted folders, not against someone swapping files
under the root while a run reads it (that needs openat2's RESOLVE_BENEATH, which Python lacks).
Rules and the user-visible outcome of each fault: docs/reliability.md.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import stat
import warnings
from contextlib import contextmanager
from pathlib import Path

MISSING = "image_missing"  # no file at the path (the removal reasons of curate and pack)
UNREADABLE = "image_unreadable"  # something is there, but it is not an image this toolkit reads

MAX_FILE_BYTES = 256 * 1024 * 1024  # larger image files are unreadable: a 1 GB '.jpg' is never read into memory
# Pillow's own hard decompression-bomb limit (2 x Image.MAX_IMAGE_PIXELS, about 13,377 x 13,377): larger is
# unreadable everywhere; below it, Pillow's warning (at half this) is not an error anywhere.
MAX_PIXELS = 178_956_970

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")
_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a folder"),
)


class ImageProblem(OSError):
    """Why one image cannot be used: `reason` (MISSING or UNREADABLE) and a one-line `detail`.

    An OSError, so code that already treats an unreadable file as one bad row keeps doing so.
    A detail names nothing outside the image root (a symlink's target): it goes into outputs
    (removed.jsonl, reports) and onto view's page.
    """

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail

    def __str__(self) -> str:
        return self.detail


def control_character(text: str) -> str | None:
    """'U+0000 at 5' for the first control character (C0, DEL, C1) in `text`, or None."""
    m = _CONTROL.search(text)
    return None if m is None else f"U+{ord(m.group()):04X} at {m.start()}"


def path_problem(image: str) -> str | None:
    """Why a relative image path can never be inside a root, from its text alone (no file system), or None."""
    where = control_character(image)
    if where is not None:
        return f"control character in image path: {where}"
    if image.startswith(("/", "\\")) or _DRIVE.match(image):
        return f"absolute image path: {image}"
    if ".." in image:  # only a '..' part can climb out (normpath costs more than the rest together)
        norm = posixpath.normpath(image.replace("\\", "/"))
        if norm == ".." or norm.startswith("../"):
            return f"image path escapes the image root: {image}"
    return None


class ImageRoot:
    """A folder of images; every path read from a dataset goes through `resolve` or `read`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.real = Path(os.path.realpath(self.root))

    def resolve(self, image: str) -> Path:
        """The real path of `image` (relative to the root), or ImageProblem when it is not a file inside it."""
        if not isinstance(image, str):
            raise ImageProblem(UNREADABLE, f"image path is {type(image).__name__}, not text")
        problem = path_problem(image)
        if problem is not None:
            raise ImageProblem(UNREADABLE, problem)
        try:
            real = Path(os.path.realpath(self.root / image, strict=True))
        except FileNotFoundError:
            raise ImageProblem(MISSING, f"no file {image} under the image root") from None
        except OSError as exc:  # ELOOP (a symlink loop), EACCES, ENAMETOOLONG, ...
            raise ImageProblem(UNREADABLE, f"{image}: {exc.strerror or exc}") from None
        if not real.is_relative_to(self.real):
            raise ImageProblem(UNREADABLE, f"{image}: a symlink to a file outside the image root")
        return real

    def read(self, image: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
        """The bytes of `image` under the root (resolve, then read_regular)."""
        return read_regular(self.resolve(image), max_bytes, name=image)

    def open(self, image: str, max_bytes: int | None = MAX_FILE_BYTES):
        """A binary file object on `image` under the root (for tars: read by parts, not all at once)."""
        return open_regular(self.resolve(image), max_bytes, name=image)


def _kind_problem(mode: int, name: str) -> ImageProblem | None:
    if stat.S_ISREG(mode):
        return None
    for test, kind in _FILE_KINDS:
        if test(mode):
            return ImageProblem(MISSING if kind == "a folder" else UNREADABLE, f"{name} is {kind}, not a file")
    return ImageProblem(UNREADABLE, f"{name} is not a regular file")


def _too_large(size: int, max_bytes: int, name: str) -> ImageProblem:
    return ImageProblem(UNREADABLE, f"{name} is {size:,} bytes, more than the maximum {max_bytes:,} for an image")


def check_size(size: int, name: str, max_bytes: int = MAX_FILE_BYTES) -> None:
    """ImageProblem when an image of `size` bytes (an object, a stored sample) is over the cap,
    before it is read."""
    if size > max_bytes:
        raise _too_large(size, max_bytes, name)


def _open_fd(path: str | Path, max_bytes: int | None, name: str) -> tuple[int, int]:
    """(descriptor, size) of the regular file `path`; ImageProblem for anything else, never blocking.

    stat first, so a FIFO or device is never opened; then open with O_NONBLOCK (a FIFO swapped in
    between does not block the open) and check the opened descriptor again with fstat.
    """
    try:
        st = os.stat(path)
        problem = _kind_problem(st.st_mode, name)
        if problem is not None:
            raise problem
        if max_bytes is not None and st.st_size > max_bytes:
            raise _too_large(st.st_size, max_bytes, name)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise ImageProblem(MISSING, f"no file {name}") from None
    except ValueError as exc:  # an embedded NUL byte
        raise ImageProblem(UNREADABLE, f"{name!r}: {exc}") from None
    except ImageProblem:
        raise
    except OSError as exc:
        raise ImageProblem(UNREADABLE, f"{name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        problem = _kind_problem(st.st_mode, name)
        if problem is not None:
            raise problem
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file: reads never wait anyway
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def open_regular(path: str | Path, max_bytes: int | None = MAX_FILE_BYTES, name: str | None = None):
    """A buffered binary file object on the regular file `path` (for tars); ImageProblem for anything
    else, never blocking (_open_fd)."""
    fd, _ = _open_fd(path, max_bytes, str(path) if name is None else name)
    return os.fdopen(fd, "rb")


def read_regular(path: str | Path, max_bytes: int = MAX_FILE_BYTES, name: str | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `max_bytes` (ImageProblem otherwise), never blocking."""
    name = str(path) if name is None else name
    fd, size = _open_fd(path, max_bytes, name)
    with os.fdopen(fd, "rb", buffering=0) as fh:
        try:
            # the size from fstat, plus one byte to see growth: read(max_bytes) would allocate max_bytes
            data = fh.read(min(size, max_bytes) + 1)
            if len(data) > size:  # it grew since fstat: read on, still no further than the maximum
                data += fh.read(max_bytes + 1 - len(data))
        except OSError as exc:
            raise ImageProblem(UNREADABLE, f"{name}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise _too_large(len(data), max_bytes, name)
    return data


def read_member(tar, info, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of tar member `info`, a regular file, bounded like files (a link member is followed
    to its regular target first: image_source.tars.link_target, which bounds the hops)."""
    if info.size > max_bytes:
        raise _too_large(info.size, max_bytes, name)
    fh = tar.extractfile(info) if info.isfile() else None
    if fh is None:
        raise ImageProblem(UNREADABLE, f"{name} is not a regular file in its tar")
    try:
        # a regular member holds exactly info.size bytes: read(max_bytes + 1) would allocate max_bytes
        data = fh.read(min(info.size, max_bytes) + 1)
    except (OSError, KeyError) as exc:  # KeyError: a link to a member that is not there
        raise ImageProblem(UNREADABLE, f"{name}: {exc}") from None
    if len(data) > max_bytes:
        raise _too_large(len(data), max_bytes, name)
    return data


def check_pixels(size: tuple[int, int], name: str = "image") -> None:
    """ImageProblem when an image of `size` (width, height) is beyond the MAX_PIXELS rule."""
    width, height = size
    if width * height > MAX_PIXELS:
        raise ImageProblem(
            UNREADABLE,
            f"{name} is {width} x {height} = {width * height:,} pixels, more than the maximum {MAX_PIXELS:,}",
        )


def _pillow():
    """PIL.Image, with its bomb warning silenced for the whole process: MAX_PIXELS decides here, and
    warnings.catch_warnings around each open is not thread-safe (curate opens on several threads, and
    one thread leaving it put the filter back while another opened a large picture). Checked at each
    call: someone else's catch_warnings may have put the filters back since."""
    from PIL import Image

    bomb = Image.DecompressionBombWarning
    if not any(f[0] == "ignore" and f[2] is bomb for f in warnings.filters):
        warnings.filterwarnings("ignore", category=bomb)
    return Image


def open_image(data, name: str = "image"):
    """Pillow's lazy open of `data` (header read, pixels not decoded) under the MAX_PIXELS rule.

    Pillow's own errors propagate (the caller names them); the bomb warning is not one of them:
    MAX_PIXELS decides. `data` may also be a binary file object (read from where it stands).
    """
    Image = _pillow()
    try:
        im = Image.open(io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data)
    except Image.DecompressionBombError as exc:  # Pillow's own check, at MAX_PIXELS too, comes first
        raise ImageProblem(UNREADABLE, f"{name}: more than the maximum {MAX_PIXELS:,} pixels ({exc})") from None
    try:
        check_pixels(im.size, name)
    except ImageProblem:
        im.close()
        raise
    return im


SIXTEEN_BIT = {"I;16", "I;16L", "I;16B", "I;16N", "I"}  # one channel, 0..65535 (PNG, TIFF)
_ORIENTATION = 0x0112  # the EXIF tag ImageOps.exif_transpose follows


def to_8bit_grey(im):
    """A 16-bit (or 32-bit integer) grey image as 8-bit 'L', its high byte as Pillow reads 16-bit RGB;
    Pillow's own convert('L') clips every value above 255 to white."""
    import numpy as np
    from PIL import Image

    a = np.asarray(im)
    if a.dtype.kind == "u" and a.dtype.itemsize == 2:  # 16-bit: the high byte, 1 byte a pixel more, not 8
        return Image.fromarray((a >> 8).astype(np.uint8), "L")
    return Image.fromarray(np.clip(a.astype(np.int64) >> 8, 0, 255).astype(np.uint8), "L")


def to_8bit(im):
    """8-bit 'L' (grey sources: 1, L, 16-bit grey) or 'RGB' (all others) of a Pillow image: EXIF
    orientation applied, 16-bit grey scaled, palette, CMYK and the rest by Pillow's own conversion,
    transparency composited onto white (as img2dataset's resizer does)."""
    from PIL import Image, ImageOps

    if im.getexif().get(_ORIENTATION, 1) != 1:
        im = ImageOps.exif_transpose(im)
    if im.mode in SIXTEEN_BIT:
        return to_8bit_grey(im)
    if im.mode in ("L", "RGB"):
        return im
    if im.mode == "1":
        return im.convert("L")
    if (im.mode == "P" and "transparency" in im.info) or im.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return im.convert("RGB")


def to_rgb(im):
    """8-bit RGB of a Pillow image (to_8bit, grey repeated in the three channels)."""
    im = to_8bit(im)
    return im if im.mode == "RGB" else im.convert("RGB")


@contextmanager
def decoding(name: str | None):
    """Pillow's many error types on a file that is not a picture, as one ImageProblem(UNREADABLE)
    whose detail starts with `name` (when given)."""
    from PIL import UnidentifiedImageError

    prefix = f"{name}: " if name else ""
    try:
        yield
    except ImageProblem:
        raise
    except UnidentifiedImageError:
        raise ImageProblem(UNREADABLE, f"{prefix}not an image Pillow can identify") from None
    except Exception as exc:  # noqa: BLE001  Pillow's plugins raise many types on corrupt input
        raise ImageProblem(UNREADABLE, f"{prefix}{type(exc).__name__}: {exc}") from None


def decode_8bit(data: bytes, name: str = "image"):
    """The decoded picture of an image file's bytes as to_8bit gives it ('L' or 'RGB');
    ImageProblem(UNREADABLE) when it is not an image."""
    with decoding(name):
        im = open_image(data, name)
        im.load()  # every byte decoded: a truncated or corrupt file fails here, not later
        return to_8bit(im)


def decode_rgb(data: bytes, name: str = "image"):
    """The decoded 8-bit RGB picture of an image file's bytes (train, eval); ImageProblem(UNREADABLE)
    when it is not an image."""
    im = decode_8bit(data, name)
    return im if im.mode == "RGB" else im.convert("RGB")


# Modes Image.reduce averages correctly (not palette indices, not 1-bit, which it refuses, nor 16-bit).
REDUCIBLE = {"L", "LA", "La", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "I", "F"}
_BYTES_PER_PIXEL = {"1": 1, "L": 1, "P": 1, "I;16": 2, "I;16L": 2, "I;16B": 2, "I;16N": 2}  # others: 4


def decoded_bytes(im) -> int:
    """Memory a full decode of the lazily opened `im` holds at once, about: Pillow's own buffer
    (4 bytes a pixel for every multi-band mode) and one converted copy of it."""
    width, height = im.size
    return 2 * width * height * _BYTES_PER_PIXEL.get(im.mode, 4)


def draft(im, side: int, mode: str = "RGB"):
    """A lazily opened JPEG set to decode at the smallest DCT scale whose sides are still at least
    `side` (libjpeg's scaling: 1/2 to 1/8 of each side; `im.size` says the decoded size); others as they are.
    `mode` "L": a colour JPEG decoded straight to grey by libjpeg (curate's hashes)."""
    if im.format == "JPEG":
        im.draft(mode, (side, side))  # "RGB" scales only, keeping the mode; a second call changes nothing
    return im


def decode_drafted(data: bytes, name: str, side: int | None = None, mode: str = "RGB"):
    """(the picture in an image file's bytes decoded whole, its size before draft): opened under
    the MAX_PIXELS rule, a JPEG at draft scale (`draft`; none when `side` is None); a truncated or
    corrupt file fails in the decode. Not converted (to_8bit, to_rgb do that); Pillow's errors
    propagate (wrap in `decoding`). The caller closes it."""
    from PIL import ImageFile

    im = open_image(data, name)
    size = im.size
    try:
        if side:
            draft(im, side, mode)
        # the decoder gets the whole file in one call, not in 64 KiB pieces (it backtracks at each)
        im.decodermaxblock = max(len(data), ImageFile.MAXBLOCK)
        im.load()
    except BaseException:
        im.close()
        raise
    return im, size


def thumbnail_of(im, side: int):
    """The lazily opened `im` as to_8bit gives it, fitted into side x side: a JPEG decoded at draft
    scale, any other picture reduced by whole factors before its conversion (a 100-megapixel RGBA
    PNG is converted at its thumbnail's size, not its own)."""
    draft(im, side)
    im.load()
    if im.mode in REDUCIBLE:
        im.thumbnail((side, side))  # in place: Image.reduce, then a resampling; EXIF kept for to_8bit
    im = to_8bit(im)
    im.thumbnail((side, side))  # the modes converted first (palette, 1-bit, 16-bit grey)
    return im


def decode_thumbnail(data: bytes, side: int, name: str = "image"):
    """thumbnail_of the picture in an image file's bytes ('L' or 'RGB', at most side x side);
    ImageProblem(UNREADABLE) when it is not an image."""
    with decoding(name):
        return thumbnail_of(open_image(data, name), side)  # not closed: the result may be `im` itself
