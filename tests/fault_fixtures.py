"""The CLI in a fresh process with its peak memory, and image files edited into faults (fault tests)."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from curate_fixtures import scene


def cli(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    """The CLI in a subprocess that reports its peak memory (KiB) on the last stderr line.

    The peak is the process's own anonymous memory at its high-water mark: VmHWM less the file
    pages still mapped at the end (shared libraries, whose resident share depends on the page
    cache: a fresh install maps torch's hot). ru_maxrss would carry over the RSS of the pytest
    process that spawned it (Linux keeps the high-water mark across exec).
    """
    wrapper = (
        "import re, runpy, sys\n"
        "sys.argv = ['caption-debias', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('caption_debias.cli.main', run_name='__main__')\n"
        "finally:\n"
        "    status = open('/proc/self/status').read()\n"
        "    kib = {k: int(re.search(k + r':\\s+(\\d+)', status).group(1)) for k in ('VmHWM', 'RssFile', 'RssShmem')}\n"
        "    print(f\"PEAK_KIB {kib['VmHWM'] - kib['RssFile'] - kib['RssShmem']}\", file=sys.stderr)\n"
    )
    try:
        return subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"caption-debias {args[0]} did not finish in {timeout} s (blocked on a special file?)")


def peak_kib(proc: subprocess.CompletedProcess) -> int:
    return int(proc.stderr.strip().splitlines()[-1].split()[1])


def edit_images(folder: Path, images: dict[int, str]) -> None:
    """Set the `image` of rows (by position) in a prepared folder's one shard, as a hand edit would,
    keeping the manifest's shard entry (digest, size) true to the edited file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text("utf-8"))
    (entry,) = manifest["shards"]
    shard = folder / entry["path"]
    table = pq.read_table(shard)
    column = table.column("image").to_pylist()
    for i, image in images.items():
        column[i] = image
    at = table.schema.get_field_index("image")
    pq.write_table(table.set_column(at, table.schema.field(at), pa.array(column, pa.string())), shard)
    data = shard.read_bytes()
    for name, value in (("sha256", hashlib.sha256(data).hexdigest()), ("bytes", len(data))):
        if name in entry:
            entry[name] = value
    manifest_path.write_text(json.dumps(manifest), "utf-8")


def picture_file(kind: str, folder: Path):
    """(file name, the reference picture): what Pillow's own conversion makes of the file."""
    from PIL import Image, ImageOps

    base = scene(7, (72, 48))
    path = folder / f"{kind}.png"
    if kind == "rgb16":
        wide = np.asarray(base).astype(np.uint16) * 256 + 3 * np.arange(72, dtype=np.uint16)[None, :, None]
        path.write_bytes(_png16(wide))
        return path.name, Image.fromarray((wide >> 8).astype(np.uint8), "RGB")
    if kind == "grey16":
        wide = np.asarray(base.convert("L")).astype(np.uint16) * 256 + 100
        Image.fromarray(wide).save(path)  # mode I;16
        return path.name, Image.fromarray((wide >> 8).astype(np.uint8), "L")
    if kind == "palette_transparent":
        pal = base.quantize(16)
        pal.save(path, transparency=int(np.asarray(pal)[0, 0]))
        with Image.open(path) as im:
            return path.name, _over_white(im)
    if kind == "cmyk":
        path = path.with_suffix(".jpg")
        base.convert("CMYK").save(path, quality=95)
        with Image.open(path) as im:
            return path.name, im.convert("RGB")
    if kind in ("la", "rgba"):
        im = base.convert("L" if kind == "la" else "RGB")
        im.putalpha(_alpha(im.size))
        im.save(path)
        with Image.open(path) as back:
            return path.name, _over_white(back)
    if kind == "exif_rotated":
        path = path.with_suffix(".jpg")
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90 degrees clockwise to display
        base.save(path, quality=95, exif=exif.tobytes())
        with Image.open(path) as im:
            return path.name, ImageOps.exif_transpose(im).convert("RGB")
    raise AssertionError(kind)


def _png16(rgb16: np.ndarray) -> bytes:
    """A 16-bit-per-channel RGB PNG (Pillow cannot write one), written with zlib by the spec."""
    h, w, _ = rgb16.shape
    raw = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in rgb16)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _over_white(im):
    from PIL import Image

    rgba = im.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")


def _alpha(size) -> "object":
    from PIL import Image

    w, h = size
    return Image.fromarray(np.tile(np.linspace(0, 255, w, dtype=np.uint8), (h, 1)), "L")
