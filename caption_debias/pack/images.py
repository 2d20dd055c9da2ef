"""One row's image: found under the image root, resized and re-encoded by img2dataset's own Resizer.

A row's `image` is a path relative to the root, or `SHARD.tar#MEMBER` inside an img2dataset
tar (as the img2dataset reader writes it). Failures carry the reason names `curate` uses,
so a removal reads the same whichever command found it.
"""

from __future__ import annotations

import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

from caption_debias import storage
from caption_debias.image_files import MISSING as IMAGE_MISSING  # no file (or tar member) at the row's image path
from caption_debias.image_files import UNREADABLE as IMAGE_UNREADABLE  # there, but not an image, or not allowed
from caption_debias.image_files import ImageProblem, ImageRoot, decode_8bit, read_member
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
    """img2dataset's Resizer class, its module file loaded alone when possible.

    `import img2dataset.resizer` first runs img2dataset/__init__, which imports the whole
    downloader (torch, webdataset, fsspec): seconds per worker process for nothing we use.
    resizer.py itself needs only cv2, albumentations and numpy; any other layout falls back
    to the plain import.
    """
    import importlib.util
    import sys

    # albumentations (which the resizer imports) otherwise asks PyPI for a newer version on import
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    name = "caption_debias._img2dataset_resizer"
    if name not in sys.modules:
        try:
            package = importlib.util.find_spec("img2dataset")
            spec = importlib.util.spec_from_file_location(name, Path(package.origin).parent / "resizer.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.Resizer  # noqa: B018  (a layout without it falls back below)
            sys.modules[name] = module
        except Exception:
            import img2dataset.resizer as module

            sys.modules[name] = module
    return sys.modules[name].Resizer


def resizer_version() -> str:
    from importlib.metadata import version

    return f"img2dataset {version('img2dataset')}"


class ImageReader:
    """Reads and resizes images of one root; keeps the img2dataset tars it opened (close() them)."""

    def __init__(self, root: str | Path, options: PackOptions):
        self.root = ImageRoot(root)
        self.resizer = _resizer_class()(
            image_size=options.image_size,
            resize_mode=options.resize_mode,
            resize_only_if_bigger=False,
            encode_format="jpg",
            encode_quality=options.encode_quality,
        )
        self._tars: dict[str, tarfile.TarFile | ImageFailed] = {}
        self._files: list = []  # the tars' open files (tarfile does not close a file it was given)

    def raw(self, image: str) -> bytes:
        """The file's bytes, or ImageFailed(image_missing | image_unreadable).

        Paths go through image_files.ImageRoot: inside the root after symlinks, regular files only,
        at most image_files.MAX_FILE_BYTES.
        """
        if storage.is_url(image):
            raise ImageFailed(
                IMAGE_MISSING, f"{image} is a URL; download it (caption-debias urls, img2dataset) and pack that folder"
            )
        tar_name, sep, member = image.partition(".tar#")
        try:
            if sep:
                return self._member(tar_name + ".tar", member)
            return self.root.read(image)
        except ImageProblem as exc:
            raise ImageFailed(exc.reason, exc.detail) from None
        except (OSError, tarfile.TarError) as exc:
            raise ImageFailed(IMAGE_UNREADABLE, f"{image}: {getattr(exc, 'strerror', None) or exc}") from None

    def _member(self, tar_name: str, member: str) -> bytes:
        if tar_name not in self._tars:
            try:
                fh = self.root.open(tar_name, max_bytes=None)  # a tar's size is not an image's
                self._files.append(fh)
                self._tars[tar_name] = tarfile.open(fileobj=fh)
            except ImageProblem as exc:
                self._tars[tar_name] = ImageFailed(exc.reason, exc.detail)
            except (OSError, tarfile.TarError) as exc:
                self._tars[tar_name] = ImageFailed(IMAGE_UNREADABLE, f"{tar_name}: not a readable tar ({exc})")
        tar = self._tars[tar_name]
        if isinstance(tar, ImageFailed):
            raise ImageFailed(tar.reason, tar.detail)
        try:
            info = tar.getmember(member)
        except KeyError:
            raise ImageFailed(IMAGE_MISSING, f"no member {member} in {tar_name}") from None
        return read_member(tar, info, f"{tar_name}#{member}")

    def resized(self, image: str) -> Resized:
        """img2dataset's resize and JPEG re-encode of the row's image, decoded by image_files.decode_rgb.

        The resizer decodes with OpenCV, which keeps 16 bits per channel (its JPEG then saturates
        to white), ignores EXIF orientation and differs from Pillow on palette and CMYK images; so
        it is handed the decoded pixels as a binary PGM/PPM (a header and the raw bytes: nothing
        to decode), the same pixels train reads.
        """
        data = self.raw(image)
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
        for tar in self._tars.values():
            if isinstance(tar, tarfile.TarFile):
                tar.close()
        for fh in self._files:
            fh.close()
        self._tars.clear()
        self._files.clear()
