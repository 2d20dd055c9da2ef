"""Urban1k: a folder with image/N.jpg and caption/N.txt (same stem); one paragraph each."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from caption_debias.readers.common import caption_problem
from caption_debias.records import Record, Reject, excerpt

NAME = "urban1k"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


def resolve(path: Path) -> Path:
    """Accept the Urban1k folder or a folder holding it."""
    if not (path / "caption").is_dir() and (path / "Urban1k" / "caption").is_dir():
        return path / "Urban1k"
    return path


def _order(p: Path):
    return (0, int(p.stem), "") if p.stem.isdigit() else (1, 0, p.stem)


def read(path: Path, name: str, options) -> Iterator[Record | Reject]:
    root = resolve(path)
    images = (
        {p.stem: p.name for p in (root / "image").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES}
        if (root / "image").is_dir()
        else {}
    )
    for txt in sorted((root / "caption").glob("*.txt"), key=_order):
        location = f"caption/{txt.name}"
        raw = txt.read_bytes()
        try:
            # Assembled caption: the file's text without its surrounding whitespace / final newline.
            caption = raw.decode("utf-8-sig").strip()
        except UnicodeDecodeError:
            yield Reject(name, location, "undecodable bytes", excerpt(raw))
            continue
        problem = caption_problem(caption)
        if problem is None and txt.stem not in images:
            problem = f"image not found: image/{txt.stem}.jpg"
        if problem:
            yield Reject(name, location, problem, excerpt(caption))
            continue
        yield Record(
            source=NAME,
            input=name,
            location=location,
            source_id=txt.stem,
            image=f"image/{images[txt.stem]}",
            caption=caption,
            split=options.split,
            meta={},
        )
