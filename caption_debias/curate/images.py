"""Image facts per file: missing, unreadable, size, sha256 and a perceptual hash.

`image_facts(path)` is the one-file specification; `image_facts_batch` runs it for a shard's
files on a few threads (file reads and Pillow's decoders release the GIL, so reading the next
file overlaps decoding this one). Speed comes from decoding little: the size is read from
the header, and a JPEG is decoded with libjpeg's DCT scaling (Pillow's draft mode, 1/2 to 1/8
of each side) straight to greyscale, which is all a 32 x 32 perceptual hash needs.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

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
    thumb: bytes | None = None  # small or flat images only: THUMB_SIDE^2 RGB pixels (the phash's second signal)


def is_url(image: str) -> bool:
    return "://" in image


def top_folder(image: str) -> str:
    """The coverage group of an image path: its first folder ('sam/images/x.jpg' -> 'sam/')."""
    if is_url(image):
        return "(urls)"
    head, sep, _ = image.replace("\\", "/").lstrip("./").partition("/")
    return f"{head}/" if sep else "(top level)"


def phash_of(image) -> int:
    """imagehash's DCT hash (64 bits) of a PIL image, as an int."""
    import imagehash

    bits = imagehash.phash(image).hash.reshape(-1)
    return int("".join("1" if b else "0" for b in bits), 2)


def is_flat(grey) -> bool:
    """A picture whose 32 x 32 grey thumbnail varies little (icons, documents on white, plain backgrounds)."""
    import numpy as np
    from PIL import Image

    from caption_debias.curate.options import FLAT_IMAGE_STD

    return float(np.asarray(grey.resize((32, 32), Image.Resampling.BOX), np.float32).std()) < FLAT_IMAGE_STD


def thumb_of(image) -> bytes:
    """THUMB_SIDE x THUMB_SIDE RGB box-filtered thumbnail (area averages: a re-encoded copy moves a few levels)."""
    from PIL import Image

    from caption_debias.curate.options import THUMB_SIDE

    return image.convert("RGB").resize((THUMB_SIDE, THUMB_SIDE), Image.Resampling.BOX).tobytes()


def thumbs_match(a: bytes, b: bytes) -> bool:
    """Specification of the second signal: no thumbnail pixel channel differs by more than THUMB_MAX_DIFF."""
    import numpy as np

    from caption_debias.curate.options import THUMB_MAX_DIFF

    diff = np.abs(np.frombuffer(a, np.uint8).astype(np.int16) - np.frombuffer(b, np.uint8).astype(np.int16))
    return int(diff.max(initial=0)) <= THUMB_MAX_DIFF


def _thumb_if_small_or_flat(data: bytes, im, width: int, height: int) -> bytes | None:
    from PIL import Image

    from caption_debias.curate.options import SMALL_IMAGE_SIDE

    small = min(width, height) < SMALL_IMAGE_SIDE
    if not small and not is_flat(im.convert("L")):
        return None
    if im.format == "JPEG":
        # draft-decoded to grey: colour matters here (a red and a blue square are one grey), so decode again
        with Image.open(io.BytesIO(data)) as full:
            full.draft("RGB", (DRAFT_SIDE, DRAFT_SIDE))
            return thumb_of(full)
    return thumb_of(im)


def image_facts(path: Path) -> ImageFacts:
    """Specification: the facts of one image file."""
    from PIL import Image, ImageFile, UnidentifiedImageError

    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return ImageFacts(MISSING)
    except OSError as exc:
        return ImageFacts(UNREADABLE, error=f"{type(exc).__name__}: {exc.strerror or exc}")
    digest = hashlib.sha256(data).digest()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                width, height = im.size
                if im.format == "JPEG":
                    im.draft("L", (DRAFT_SIDE, DRAFT_SIDE))
                # the decoder gets the whole file in one call, not in 64 KiB pieces (it backtracks at each)
                im.decodermaxblock = max(len(data), ImageFile.MAXBLOCK)
                im.load()  # decodes every byte: a truncated or corrupt file fails here
                phash = phash_of(im)
                thumb = _thumb_if_small_or_flat(data, im, width, height)
    except UnidentifiedImageError:
        return ImageFacts(UNREADABLE, sha256=digest, error="not an image Pillow can identify")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as exc:
        return ImageFacts(UNREADABLE, sha256=digest, error=f"{type(exc).__name__}: {exc}")
    except Image.DecompressionBombError as exc:
        return ImageFacts(UNREADABLE, sha256=digest, error=f"DecompressionBombError: {exc}")
    return ImageFacts(OK, width, height, digest, phash, thumb=thumb)


def image_facts_batch(paths: list[Path | None], threads: int = 4) -> list[ImageFacts]:
    """image_facts for every path (None: not checked, e.g. a URL), in order."""
    todo = [(i, p) for i, p in enumerate(paths) if p is not None]
    out = [ImageFacts(NOT_CHECKED)] * len(paths)
    if threads <= 1 or len(todo) < 2:
        for i, p in todo:
            out[i] = image_facts(p)
        return out
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for (i, _), facts in zip(todo, pool.map(image_facts, [p for _, p in todo])):
            out[i] = facts
    return out


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()
