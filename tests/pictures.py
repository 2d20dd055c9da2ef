"""Test pictures: every picture a test or fixture module makes comes from these makers.

- `scene(seed, size)`: shapes in random colours, blurred (distinct seeds: far-apart perceptual hashes);
- `picture(size, fill, *shapes, mode=)`: a flat picture with rectangles and ellipses drawn on it, in
  order (`("ellipse", box, fill)`); `tint(i)` is the i-th colour of a fixed run;
- `noise(size, seed)`: uniform random RGB pixels (they do not compress);
- `grey16_png(grey)` / `rgb16_png(rgb)`: 16-bit PNG bytes, `eight_bit(wide, mode)` their 8-bit picture;
  `png_header(w, h)`: a PNG header and no pixels; `banded_png(size, mode, fill, band, colour)`: a flat PNG
  with a rectangle, written fast at any size (100 megapixels in a fraction of a second);
- `picture_file(kind, folder)`: a file in an awkward mode (16-bit, palette, CMYK, alpha, EXIF-rotated)
  and the picture Pillow's own conversion makes of it;
- `encoded(im, fmt, **params)`: the picture's file bytes; `write(im, path, **params)`: its file;
- `truncated(path, data, keep)` and `not_a_picture(path, text)`: files a reader must refuse.

The makers are deterministic: a test that compares hashes or bytes gets the same pixels every run.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageOps

Shape = tuple[str, tuple[float, float, float, float], Any]  # ("rectangle" | "ellipse", box, fill)


def scene(seed: int, size: tuple[int, int] = (96, 80)) -> Image.Image:
    """A synthetic picture: shapes in random colours (distinct seeds give far-apart perceptual hashes)."""
    r = random.Random(seed)
    w, h = size
    im = Image.new("RGB", (w * 4, h * 4), tuple(r.randrange(256) for _ in range(3)))
    d = ImageDraw.Draw(im)
    for _ in range(10):
        x, y, s = r.randrange(w * 4), r.randrange(h * 4), r.randrange(40, 200)
        d.ellipse((x, y, x + s, y + s), fill=tuple(r.randrange(256) for _ in range(3)))
        x, y = r.randrange(w * 4), r.randrange(h * 4)
        d.rectangle((x, y, x + s, y + s // 2), fill=tuple(r.randrange(256) for _ in range(3)))
    return im.filter(ImageFilter.GaussianBlur(3)).resize((w, h))


def picture(size: tuple[int, int], fill: Any, *shapes: Shape, mode: str = "RGB") -> Image.Image:
    """A `mode` picture of one colour with `shapes` drawn on it, in order."""
    im = Image.new(mode, size, fill)
    draw = ImageDraw.Draw(im)
    for kind, box, colour in shapes:
        getattr(draw, kind)(box, fill=colour)
    return im


def tint(i: int) -> tuple[int, int, int]:
    """The i-th colour of a fixed run (neighbours far apart)."""
    return (i * 37 % 256, i * 91 % 256, i * 53 % 256)


def noise(size: tuple[int, int], seed: int) -> Image.Image:
    """Uniform random RGB pixels of `size` (numpy's generator of `seed`)."""
    w, h = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def encoded(im: Image.Image, fmt: str = "PNG", **params: Any) -> bytes:
    """The file bytes of `im` in `fmt` (Pillow's encoder, `params` as Image.save takes them)."""
    out = io.BytesIO()
    im.save(out, fmt, **params)
    return out.getvalue()


def write(im: Image.Image, path: Path, **params: Any) -> Path:
    """`im` saved at `path` (format from the suffix unless `format=` is given), its folders made."""
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, **params)
    return path


def truncated(path: Path, data: bytes, keep: int | None = None) -> Path:
    """The first `keep` bytes of `data` (half of them when None) at `path`: a cut file."""
    path.write_bytes(data[: len(data) // 2 if keep is None else keep])
    return path


def not_a_picture(path: Path, text: str = "<html>not found</html>") -> Path:
    """`text` under a picture's name (a server's error page saved as the image)."""
    path.write_text(text, "utf-8")
    return path


# -- PNGs Pillow does not write --------------------------------------------------------------------


def grey16_png(grey: np.ndarray, **params: Any) -> bytes:
    """A real 16-bit grey PNG (Pillow's mode I;16) of `grey`."""
    data = encoded(Image.fromarray(grey.astype(np.uint16)), "PNG", **params)
    assert data[24] == 16  # IHDR bit depth
    return data


def eight_bit(wide: np.ndarray, mode: str) -> Image.Image:
    """The 8-bit picture of 16-bit values: each one's high byte."""
    return Image.fromarray((wide >> 8).astype(np.uint8), mode)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def rgb16_png(rgb16: np.ndarray) -> bytes:
    """A 16-bit-per-channel RGB PNG (Pillow cannot write one), written with zlib by the spec."""
    h, w, _ = rgb16.shape
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in rgb16)
    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height (no pixel data: a rule on size must refuse it unread)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IEND", b"")


# -- awkward modes ---------------------------------------------------------------------------------


def picture_file(kind: str, folder: Path) -> tuple[str, Image.Image]:
    """(file name, the reference picture): what Pillow's own conversion makes of the file."""
    base = scene(7, (72, 48))
    path = folder / f"{kind}.png"
    if kind == "rgb16":
        wide = np.asarray(base).astype(np.uint16) * 256 + 3 * np.arange(72, dtype=np.uint16)[None, :, None]
        path.write_bytes(rgb16_png(wide))
        return path.name, eight_bit(wide, "RGB")
    if kind == "grey16":
        wide = np.asarray(base.convert("L")).astype(np.uint16) * 256 + 100
        path.write_bytes(grey16_png(wide))
        return path.name, eight_bit(wide, "L")
    if kind == "palette_transparent":
        pal = base.quantize(16)
        write(pal, path, transparency=int(np.asarray(pal)[0, 0]))
        with Image.open(path) as im:
            return path.name, _over_white(im)
    if kind == "cmyk":
        path = write(base.convert("CMYK"), path.with_suffix(".jpg"), quality=95)
        with Image.open(path) as im:
            return path.name, im.convert("RGB")
    if kind in ("la", "rgba"):
        im = base.convert("L" if kind == "la" else "RGB")
        im.putalpha(_alpha(im.size))
        write(im, path)
        with Image.open(path) as back:
            return path.name, _over_white(back)
    if kind == "exif_rotated":
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90 degrees clockwise to display
        path = write(base, path.with_suffix(".jpg"), quality=95, exif=exif.tobytes())
        with Image.open(path) as im:
            return path.name, ImageOps.exif_transpose(im).convert("RGB")
    raise AssertionError(kind)


def _over_white(im: Image.Image) -> Image.Image:
    rgba = im.convert("RGBA")
    return Image.alpha_composite(picture(rgba.size, (255, 255, 255, 255), mode="RGBA"), rgba).convert("RGB")


def _alpha(size: tuple[int, int]) -> Image.Image:
    w, h = size
    return Image.fromarray(np.tile(np.linspace(0, 255, w, dtype=np.uint8), (h, 1)), "L")


def banded_png(size: tuple[int, int], mode: str, fill: Any, band: tuple[int, int, int, int], colour: Any) -> bytes:
    """A PNG of `size` in `mode` (RGB, RGBA or 16-bit grey "I;16"): `fill` with the rectangle `band` (x0, y0,
    x1, y1) in `colour`. Written by the spec because Pillow's encoder tries five filters on every row (seconds
    for a 100-megapixel picture): here each run of equal rows is its first row and then "same as above" rows,
    whose compressed form is made once and repeated (zlib's full flush makes every piece stand alone)."""
    channels, depth, kind = {"RGB": (3, 8, 2), "RGBA": (4, 8, 6), "I;16": (1, 16, 0)}[mode]
    w, h = size
    x0, y0, x1, y1 = band
    plain = np.empty((w, channels), ">u2" if depth == 16 else np.uint8)
    plain[:] = fill
    banded = plain.copy()
    banded[x0:x1] = colour
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts, adler = [], 1

    def piece(raw: bytes, times: int = 1) -> None:
        nonlocal adler
        parts.append((comp.compress(raw) + comp.flush(zlib.Z_FULL_FLUSH)) * times)
        for _ in range(times):
            adler = zlib.adler32(raw, adler)

    same = b"\x02" + bytes(plain.nbytes)  # filter Up, no difference: the row above again
    for row, count in ((plain, y0), (banded, y1 - y0), (plain, h - y1)):
        if count > 0:
            piece(b"\x00" + row.tobytes())
            blocks, rest = divmod(count - 1, 64)
            if blocks:
                piece(same * 64, blocks)
            if rest:
                piece(same * rest)
    idat = b"\x78\xda" + b"".join(parts) + comp.flush() + struct.pack(">I", adler)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, kind, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
