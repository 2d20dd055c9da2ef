"""Image facts per file: missing, unreadable, size, sha256 and a perceptual hash.

`image_facts(path)` is the one-file specification (`facts_of_bytes` of its bytes); `source_facts` (and
`image_facts_batch`, for full paths) runs it over an image_source.ImageSource,
which reads on a few threads (file reads and Pillow's decoders release the GIL, so reading the next
file overlaps decoding this one). Speed comes from decoding little: the size is read from
the header, and a JPEG is decoded with libjpeg's DCT scaling (Pillow's draft mode, 1/2 to 1/8
of each side) straight to greyscale, which is all a 32 x 32 perceptual hash needs.

Every file is read and decoded through `caption_debias.image_files` (bounded reads, the pixel rule,
one conversion to 8-bit): the hash and the thumbnails see the picture every other stage sees (a
16-bit grey is its high byte, not white; transparency lies on white; EXIF orientation applied).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from caption_debias import image_files, storage

OK, MISSING, UNREADABLE, NOT_CHECKED = 0, 1, 2, 3
STATUS_NAMES = {OK: "present", MISSING: "missing", UNREADABLE: "unreadable", NOT_CHECKED: "not_checked"}
DRAFT_SIDE = 128  # decode JPEGs at the smallest DCT scale whose sides are still >= 128 px (phash uses 32)


@dataclass(frozen=True)
class ImageFacts:
    status: int
    width: int | None = None
    height: int | None = None
    sha256: bytes | None = None
    phash: int | None = None  # 64 bits
    error: str | None = None
    # the phash's second signal: THUMB_SIDE^2 RGB pixels of a small picture; LATER (b"") for a large
    # flat one (its thumbnail is made only if its phash matches another's: `thumb_file`); None otherwise
    thumb: bytes | None = None


def top_folder(image: str) -> str:
    """The coverage group of an image path: its first folder ('sam/images/x.jpg' -> 'sam/')."""
    if storage.is_url(image):
        return "(urls)"
    head, sep, _ = image.replace("\\", "/").lstrip("./").partition("/")
    return f"{head}/" if sep else "(top level)"


def phash_of(image) -> int:
    """imagehash's DCT hash (64 bits) of a PIL image, as an int."""
    import imagehash

    bits = imagehash.phash(image).hash.reshape(-1)
    return int("".join("1" if b else "0" for b in bits), 2)


def is_flat(grey) -> bool:
    """A picture mostly of one grey level: at least FLAT_SHARE of its 32 x 32 thumbnail's pixels lie
    within 8 levels of the most common one (icons, charts, documents on white, plain backgrounds)."""
    import numpy as np
    from PIL import Image

    from caption_debias.curate.options import FLAT_SHARE

    pixels = np.asarray(grey.resize((32, 32), Image.Resampling.BOX), np.uint8).ravel()
    window = np.convolve(np.bincount(pixels, minlength=256), np.ones(17, np.int64), mode="same")
    return int(window.max()) >= FLAT_SHARE * pixels.size


def thumb_of(image) -> bytes:
    """THUMB_SIDE x THUMB_SIDE RGB box-filtered thumbnail (area averages: a re-encoded copy moves a few levels)
    of an 8-bit picture (image_files.to_8bit: 'L' or 'RGB'); a grey one is resized before it is made RGB."""
    from PIL import Image

    from caption_debias.curate.options import THUMB_SIDE

    return image.resize((THUMB_SIDE, THUMB_SIDE), Image.Resampling.BOX).convert("RGB").tobytes()


def thumbs_match(a: bytes, b: bytes) -> bool:
    """Specification of the second signal: no thumbnail pixel channel differs by more than THUMB_MAX_DIFF."""
    import numpy as np

    from caption_debias.curate.options import THUMB_MAX_DIFF

    diff = np.abs(np.frombuffer(a, np.uint8).astype(np.int16) - np.frombuffer(b, np.uint8).astype(np.int16))
    return int(diff.max(initial=0)) <= THUMB_MAX_DIFF


LATER = b""  # a large flat picture: its thumbnail is made when needed (a second decode, in colour)


def thumb_file(path: Path) -> bytes:
    """thumb_of the file, decoded in colour (a JPEG at draft scale): colour matters here, a red and
    a blue square are one grey. Read and decoded as every stage does (image_files); ImageProblem
    (an OSError) when it cannot be."""
    return thumb_of_bytes(image_files.read_regular(path), path.name)


def thumb_of_bytes(data: bytes, name: str) -> bytes:
    """thumb_file of an image's bytes (a file's, a tar member's, a stored sample's)."""
    with image_files.decoding(name):
        im = image_files.draft(image_files.open_image(data, name), DRAFT_SIDE)
        return thumb_of(image_files.to_8bit(im))


def _thumb_if_small_or_flat(data: bytes, im, pixels, width: int, height: int) -> bytes | None:
    """The thumbnail of a small picture, LATER for a large flat one, None otherwise; `pixels` is
    `im` as to_8bit gives it (grey when `im` was draft-decoded as a grey JPEG)."""
    from caption_debias.curate.options import SMALL_IMAGE_SIDE

    if min(width, height) >= SMALL_IMAGE_SIDE:
        return LATER if is_flat(pixels if pixels.mode == "L" else pixels.convert("L")) else None
    if im.format == "JPEG":  # draft-decoded to grey: decode this small file again in colour
        return thumb_of(image_files.decode_8bit(data))
    return thumb_of(pixels)


def image_facts(path: Path) -> ImageFacts:
    """Specification: the facts of one image file (read bounded and never blocking: image_files.read_regular)."""
    try:
        data = image_files.read_regular(path)
    except image_files.ImageProblem as exc:
        return problem_facts(exc)
    return facts_of_bytes(data, path.name)


def problem_facts(exc: image_files.ImageProblem) -> ImageFacts:
    """The facts of an image that could not be read (not found, or not allowed)."""
    return ImageFacts(MISSING if exc.reason == image_files.MISSING else UNREADABLE, error=exc.detail)


def facts_of_bytes(data: bytes, name: str) -> ImageFacts:
    """The facts of an image's bytes, wherever they were read from (a file, a tar member, a sample)."""
    digest = hashlib.sha256(data).digest()
    if "#" not in name:  # a loose file by its file name, as before; a member by SHARD.tar#MEMBER
        name = name.rpartition("/")[2]
    try:
        with image_files.decoding(None):
            im, (width, height) = image_files.decode_drafted(data, name, DRAFT_SIDE, "L")  # a JPEG straight to grey
            with im:
                pixels = image_files.to_8bit(im)
                phash = phash_of(pixels)
                thumb = _thumb_if_small_or_flat(data, im, pixels, width, height)
    except image_files.ImageProblem as exc:  # beyond the MAX_PIXELS rule, or not a picture
        return ImageFacts(UNREADABLE, sha256=digest, error=exc.detail)
    return ImageFacts(OK, width, height, digest, phash, thumb=thumb)


def source_facts(source, images: list, keys: list | None = None, threads: int | None = None) -> list[ImageFacts]:
    """facts_of_bytes of every row's image read through an image_source.ImageSource (rows grouped by
    tar, one pass per tar), in row order; NOT_CHECKED where the image is None."""
    out = source.map(images, facts_of_bytes, keys, threads)
    return [
        ImageFacts(NOT_CHECKED) if f is None else problem_facts(f) if isinstance(f, image_files.ImageProblem) else f
        for f in out
    ]


def image_facts_batch(paths: list, threads: int = 4) -> list[ImageFacts]:
    """image_facts of every full path (None: not checked), in order, read through one
    image_source.ImageSource over the folder that holds them all (symlinks followed here) on
    `threads` threads: an evaluation set's images (decontaminate.py), which the loaders name by full path."""
    from caption_debias.image_source import ImageSource, Root

    todo = [i for i, p in enumerate(paths) if p is not None]
    out = [ImageFacts(NOT_CHECKED)] * len(paths)
    if not todo:
        return out
    real = [os.path.realpath(paths[i]) for i in todo]
    base = os.path.commonpath([os.path.dirname(p) for p in real])
    source = ImageSource(Root(base, base), threads=threads)
    for i, facts in zip(todo, source_facts(source, [os.path.relpath(p, base) for p in real])):
        out[i] = facts
    return out


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()
