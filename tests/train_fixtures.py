"""Small prepared folder + images for the train tests (written by `prepare` on a JSON-lines table)."""

from __future__ import annotations

import json
from pathlib import Path

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]
SHAPES = ["circle", "square", "triangle", "star"]


def make_prepared(root: Path, n: int = 24, groups: int = 0, missing: tuple[int, ...] = ()) -> tuple[Path, Path]:
    """Returns (prepared folder, image root). Captions: a summary sentence + 2..4 detail sentences."""
    from PIL import Image, ImageDraw

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        color, shape = COLORS[i % len(COLORS)], SHAPES[(i // len(COLORS)) % len(SHAPES)]
        name = f"img{i:04d}.png"
        if i not in missing:
            im = Image.new("RGB", (64, 64), (i * 37 % 256, i * 91 % 256, i * 53 % 256))
            ImageDraw.Draw(im).ellipse((8 + i % 16, 8, 40 + i % 16, 40), fill=(255 - i * 7 % 256, 20, 90))
            im.save(images / name)
        details = [
            f"The {shape} sits near the left edge.",
            f"Its border is thin and {COLORS[(i + 3) % 8]}.",
            "The background is plain.",
            f"There are {i % 5 + 1} small dots around it.",
        ][: 1 + i % 4]
        single = i % 6 == 5
        caption = f"This image shows a {color} {shape}." + ("" if single else " " + " ".join(details))
        row = {"key": f"k{i}", "image": name, "caption": caption}
        if groups:
            row["group"] = f"g{i % groups}"
        rows.append(row)
    table = root / "table.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    out = root / "prepared"
    prepare([table], out, PrepareOptions(format="table", quiet=True))
    return out, images
