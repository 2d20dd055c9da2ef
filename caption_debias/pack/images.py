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
from caption_debias.pack.options import PackOptions

IMAGE_MISSING = "image_missing"  # no file (or tar member) at the row's image path
IMAGE_UNREADABLE = "image_unreadable"  # there, but not a decodable image


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
        self.root = Path(root)
        self.resizer = _resizer_class()(
            image_size=options.image_size,
            resize_mode=options.resize_mode,
            resize_only_if_bigger=False,
            encode_format="jpg",
            encode_quality=options.encode_quality,
        )
        self._tars: dict[str, tarfile.TarFile | None] = {}

    def raw(self, image: str) -> bytes:
        """The file's bytes, or ImageFailed(image_missing | image_unreadable)."""
        if storage.is_url(image):
            raise ImageFailed(
                IMAGE_MISSING, f"{image} is a URL; download it (caption-debias urls, img2dataset) and pack that folder"
            )
        tar_name, sep, member = image.partition(".tar#")
        try:
            if sep:
                return self._member(tar_name + ".tar", member)
            path = self.root / image
            if not path.is_file():
                raise ImageFailed(IMAGE_MISSING, f"no file {image} under the image root")
            return path.read_bytes()
        except OSError as exc:
            raise ImageFailed(IMAGE_UNREADABLE, f"{image}: {exc.strerror or exc}") from None

    def _member(self, tar_name: str, member: str) -> bytes:
        if tar_name not in self._tars:
            path = self.root / tar_name
            self._tars[tar_name] = tarfile.open(path) if path.is_file() else None
        tar = self._tars[tar_name]
        if tar is None:
            raise ImageFailed(IMAGE_MISSING, f"no file {tar_name} under the image root")
        try:
            info = tar.getmember(member)
        except KeyError:
            raise ImageFailed(IMAGE_MISSING, f"no member {member} in {tar_name}") from None
        return tar.extractfile(info).read()

    def resized(self, image: str) -> Resized:
        """img2dataset's resize and JPEG re-encode of the row's image."""
        data = self.raw(image)
        jpg, width, height, original_width, original_height, err = self.resizer(io.BytesIO(data))
        if err is not None:
            raise ImageFailed(IMAGE_UNREADABLE, f"{image}: {err}")
        return Resized(jpg, width, height, original_width, original_height)

    def close(self) -> None:
        for tar in self._tars.values():
            if tar is not None:
                tar.close()
        self._tars.clear()
