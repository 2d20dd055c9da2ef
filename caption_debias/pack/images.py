"""One row's image: found under the image root, resized and re-encoded by img2dataset's own Resizer.

A row's `image` is a path relative to the root, `SHARD.tar#MEMBER` inside an img2dataset (or
pack's own) tar, a sample of img2dataset's parquet output, or a URL found in img2dataset's
output under the root (image_source); a chunk's rows of one tar are read in one pass. Failures carry the reason names `curate` uses,
so a removal reads the same whichever command found it.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import sys
from dataclasses import dataclass
from typing import Iterator

from caption_debias.image_files import MISSING as IMAGE_MISSING  # no file (or tar member) at the row's image path
from caption_debias.image_files import UNREADABLE as IMAGE_UNREADABLE  # there, but not an image, or not allowed
from caption_debias.image_files import ImageProblem, decode_8bit
from caption_debias.image_source import ImageSource, Root
from caption_debias.pack.options import PackOptions


class ImageFailed(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@dataclass
class Resized:
    jpg: bytes
    width: int
    height: int
    original_width: int
    original_height: int


def _resizer_class():
    """img2dataset's Resizer, from its module `img2dataset.resizer`, by the import system.

    The package's __init__ imports its downloader (pandas, wandb, ray, fire), which pack never runs:
    about 3.8 CPU s in every process that resizes (docs/benchmarks.md). So, unless img2dataset is
    imported already, the module is imported inside the package with its __init__ not run, and both
    names leave sys.modules after: a later `import img2dataset` runs the whole package as usual.
    """
    # albumentations (which the resizer imports) otherwise asks PyPI for a newer version on import
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    if "img2dataset" in sys.modules:
        from img2dataset.resizer import Resizer

        return Resizer
    spec = importlib.util.find_spec("img2dataset")
    assert spec is not None, "img2dataset is a dependency of caption-debias"
    sys.modules["img2dataset"] = importlib.util.module_from_spec(spec)  # the package, __init__ not run
    try:
        return importlib.import_module("img2dataset.resizer").Resizer
    finally:
        sys.modules.pop("img2dataset.resizer", None)
        sys.modules.pop("img2dataset", None)


def resizer_version() -> str:
    from importlib.metadata import version

    return f"img2dataset {version('img2dataset')}"


class ImageReader:
    """Reads and resizes the images of one root (a folder here or an fsspec URL) through an ImageSource."""

    def __init__(self, root: str | Root, options: PackOptions):
        self.source = ImageSource(root if isinstance(root, Root) else Root(str(root), str(root)))
        self.resizer = _resizer_class()(
            image_size=options.image_size,
            resize_mode=options.resize_mode,
            resize_only_if_bigger=False,
            encode_format="jpg",
            encode_quality=options.encode_quality,
        )

    def raw(self, image: str, key: object = None) -> bytes:
        """Specification: one row's image bytes, or ImageFailed(image_missing | image_unreadable).

        Read through image_source (image_files' gate: inside the root after symlinks, regular files
        or tar members only, at most image_files.MAX_FILE_BYTES); a URL row through img2dataset's
        output under the root, by its key.
        """
        try:
            return self.source.read(image, key)
        except ImageProblem as exc:
            raise ImageFailed(exc.reason, exc.detail) from None

    def resized(self, image: str, key: object = None) -> Resized:
        """Specification: resize_bytes of one row's image, read alone (raw)."""
        return self.resize_bytes(self.raw(image, key), image)

    def resized_rows(self, images: list[str], keys: list[object]) -> Iterator[Resized | ImageFailed]:
        """resized of every row, in row order: the rows of one tar read in one pass (ImageSource)."""

        def one(data: bytes, name: str) -> Resized | ImageFailed:
            try:
                return self.resize_bytes(data, name)
            except ImageFailed as failed:
                return failed

        results = self.source.in_row_order(images, one, keys)
        for image in images:
            if image is None:
                yield ImageFailed(IMAGE_MISSING, "the row names no image")
                continue
            _, result = next(results)
            yield ImageFailed(result.reason, result.detail) if isinstance(result, ImageProblem) else result

    def resize_bytes(self, data: bytes, image: str) -> Resized:
        """img2dataset's resize and JPEG re-encode of an image's bytes, decoded by image_files.decode_8bit.

        The resizer decodes with OpenCV, which keeps 16 bits per channel (its JPEG then saturates
        to white), ignores EXIF orientation and differs from Pillow on palette and CMYK images; so
        it is handed the decoded pixels as a binary PGM/PPM (a header and the raw bytes: nothing
        to decode), the same pixels train reads.
        """
        try:
            pixels = decode_8bit(data, image)
        except ImageProblem as exc:
            raise ImageFailed(exc.reason, exc.detail) from None
        magic = b"P5" if pixels.mode == "L" else b"P6"  # grey stays one channel, as OpenCV would decode it
        ppm = magic + b" %d %d 255\n" % pixels.size + pixels.tobytes()
        jpg, width, height, original_width, original_height, err = self.resizer(io.BytesIO(ppm))
        if err is not None:
            raise ImageFailed(IMAGE_UNREADABLE, f"{image}: {err}")
        return Resized(jpg, width, height, original_width, original_height)

    def close(self) -> None:
        """Nothing stays open between rows (each tar is closed after its pass); kept for callers."""
