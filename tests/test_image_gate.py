"""One image gate: every image file the toolkit decodes is opened by caption_debias/image_files.py,
so curate's hashes and thumbnails, view's thumbnails and the training stages see one picture.

Real files throughout: 16-bit PNGs written by Pillow, flat pictures past Pillow's bomb warning,
curate run as a command on a prepared folder."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from cli_process import run_cli
from pictures import eight_bit, encoded, grey16_png, picture, picture_file, scene

from caption_debias import image_files

ROOT = Path(__file__).resolve().parent.parent


def _opens_images(tree: ast.AST) -> list[int]:
    """Lines that call Pillow's Image.open (as `Image.open`, `PIL.Image.open`, or imported by name)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "open":
            base = node.value
            if (isinstance(base, ast.Name) and base.id == "Image") or (
                isinstance(base, ast.Attribute) and base.attr == "Image"
            ):
                lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "PIL.Image":
            if any(alias.name == "open" for alias in node.names):
                lines.append(node.lineno)
    return lines


def _outside_image_files(find: Callable[[ast.AST], list[int]]) -> list[str]:
    """`path:line` of each line `find` reports in caption_debias/ and cli/, image_files.py aside."""
    found = []
    for folder in ("caption_debias", "cli"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != ROOT / "caption_debias" / "image_files.py":
                found += [f"{path.relative_to(ROOT)}:{line}" for line in find(ast.parse(path.read_text("utf-8")))]
    return found


def test_image_open_is_called_only_in_image_files():
    found = _outside_image_files(_opens_images)
    assert found == [], "Image.open outside caption_debias/image_files.py: " + ", ".join(found)
    # the check finds what it looks for
    assert _opens_images(ast.parse("from PIL import Image\nImage.open(p)\nimport PIL\nPIL.Image.open(p)")) == [2, 4]
    assert _opens_images(ast.parse("from PIL.Image import open as o")) == [1]


def _decodes_images(tree: ast.AST) -> list[int]:
    """Lines that draft or decode a Pillow image themselves: `x.draft(...)` (not image_files.draft),
    `x.load()` with no argument, `x.decodermaxblock = ...`."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            if node.func.attr == "draft" and not (isinstance(base, ast.Name) and base.id == "image_files"):
                lines.append(node.lineno)
            if node.func.attr == "load" and not node.args and not node.keywords:
                lines.append(node.lineno)
        if isinstance(node, ast.Attribute) and node.attr == "decodermaxblock" and isinstance(node.ctx, ast.Store):
            lines.append(node.lineno)
    return lines


def test_draft_and_decode_are_called_only_in_image_files():
    """curate's hashes and score's inputs are decoded by image_files (issue 39, item 6)."""
    found = _outside_image_files(_decodes_images)
    assert found == [], "Pillow draft or decode outside caption_debias/image_files.py: " + ", ".join(found)
    planted = "im.draft('L', (1, 1))\nim.decodermaxblock = 9\nim.load()\nimage_files.draft(im, 8)\njson.load(f)"
    assert _decodes_images(ast.parse(planted)) == [1, 2, 3]


def test_curate_reads_images_only_through_the_image_source():
    """curate's rows and its evaluation sets (--decontaminate) are read through image_source's
    ImageSource, the one reader with a thread pool; curate keeps no pool of its own (issue 39, item 6)."""
    found = []
    for path in sorted((ROOT / "caption_debias" / "curate").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Name) and node.id == "ThreadPoolExecutor":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == [], "an image thread pool outside image_source: " + ", ".join(found)


def _scene_grey(seed: int, size=(96, 80)) -> np.ndarray:
    return np.asarray(scene(seed, size).convert("L")).astype(np.uint16)


def test_view_thumbnail_of_a_16_bit_grey_png_is_grey_not_white(tmp_path):
    from caption_debias.folder_rows.thumbs import ThumbCache

    (tmp_path / "g.png").write_bytes(grey16_png(np.full((60, 80), 78 * 256 + 100)))
    jpeg = ThumbCache(tmp_path / "cache").for_file(tmp_path, "g.png")
    thumb = image_files.decode_8bit(jpeg)
    assert thumb.size == (80, 60) and abs(float(np.asarray(thumb).mean()) - 78) < 2  # was 255: clipped white
    assert np.asarray(image_files.decode_8bit((tmp_path / "g.png").read_bytes())).mean() == 78  # what pack sees


@pytest.mark.parametrize("kind", ["rgb16", "grey16", "palette_transparent", "cmyk", "la", "rgba", "exif_rotated"])
def test_view_thumbnails_show_the_picture_the_training_stages_decode(tmp_path, kind):
    from caption_debias.folder_rows.thumbs import QUALITY, ThumbCache

    name, reference = picture_file(kind, tmp_path)  # smaller than a thumbnail: shown at its own size
    jpeg = ThumbCache(tmp_path / "cache").for_file(tmp_path, name)
    mode = image_files.decode_8bit((tmp_path / name).read_bytes()).mode
    expect = encoded(reference.convert(mode), "JPEG", quality=QUALITY, optimize=True)
    assert jpeg == expect, kind  # the JPEG of exactly the reference picture


def test_decode_thumbnail_reduces_before_converting(tmp_path):
    """A large RGBA PNG: the thumbnail equals the full conversion's thumbnail, made at the small size."""
    rgba = picture((3000, 2000), (200, 30, 30, 128), ("rectangle", (0, 0, 1499, 1999), (20, 20, 220, 255)), mode="RGBA")
    data = encoded(rgba, "PNG")
    im = image_files.open_image(data)
    assert image_files.decoded_bytes(im) == 2 * 3000 * 2000 * 4
    thumb = image_files.decode_thumbnail(data, 256)
    full = image_files.decode_8bit(data)
    full.thumbnail((256, 256))
    assert thumb.mode == "RGB" and thumb.size == full.size == (256, 171)
    assert np.abs(np.asarray(thumb, np.int16) - np.asarray(full, np.int16)).max() <= 2


def _prepare(tmp_path: Path, images: dict[str, bytes]) -> Path:
    import random

    from curate_fixtures import caption

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rng = random.Random(3)
    root = tmp_path / "images"
    root.mkdir()
    rows = []
    for name, data in images.items():
        (root / name).write_bytes(data)
        rows.append({"key": Path(name).stem, "image": name, "caption": caption(rng)})
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([tmp_path / "t.jsonl"], tmp_path / "prepared", PrepareOptions(format="table", quiet=True))
    return root


def _curate(tmp_path: Path, root: Path) -> subprocess.CompletedProcess:
    return run_cli("curate", str(tmp_path / "prepared"), "--out", str(tmp_path / "curated"), "--image-root", str(root))


def _removed(folder: Path) -> dict[str, dict]:
    lines = (folder / "removed.jsonl").read_text("utf-8").splitlines()
    return {json.loads(x)["key"]: json.loads(x) for x in lines}


def test_curate_tells_16_bit_greys_of_different_brightness_apart_and_finds_their_8_bit_copy(tmp_path):
    """Two 16-bit pictures of one scene, one half as bright (one perceptual hash), and an 8-bit copy
    of the bright one: the copy is the duplicate; the darker picture is not (its thumbnail is darker)."""
    grey = _scene_grey(11) * 256 + 100
    eight = encoded(eight_bit(grey, "L"), "PNG")
    root = _prepare(tmp_path, {"bright.png": grey16_png(grey), "dark.png": grey16_png(grey // 2), "copy.png": eight})
    proc = _curate(tmp_path, root)
    assert proc.returncode == 0, proc.stderr
    removed = _removed(tmp_path / "curated")
    assert set(removed) == {"table/copy"}, removed  # was {"table/dark"}: both 16-bit thumbnails white
    assert removed["table/copy"]["reason"] == "duplicate_image"
    assert removed["table/copy"]["detail"]["match"] == "table/bright"


def test_curate_prints_no_decompression_bomb_warning(tmp_path):
    """Two flat 9,500 x 9,500 greys (past Pillow's warning at 89.5 megapixels, within MAX_PIXELS) whose
    hashes match: their colour thumbnails are decoded a second time, through the one gate, silently."""
    files = {
        name: encoded(picture((9500, 9500), level, mode="L"), "PNG", compress_level=1)
        for name, level in (("a.png", 40), ("b.png", 200))
    }
    root = _prepare(tmp_path, files)
    proc = _curate(tmp_path, root)
    assert proc.returncode == 0, proc.stderr
    assert "DecompressionBomb" not in proc.stderr and "Warning" not in proc.stderr, proc.stderr
    assert _removed(tmp_path / "curated") == {}  # one hash, two greys: the thumbnails tell them apart
