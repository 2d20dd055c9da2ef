"""Small fixtures shared by the eval and probe tests: synthetic images and a prepared folder."""

from __future__ import annotations

import json
import random
from pathlib import Path

from caption_debias.synth import world as synth_world

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]
RGB = {**synth_world.COLOURS, "black": (20, 20, 20)}  # the synthetic world's palette, and black


def make_images(root: Path, n: int, seed: int = 0, size: int = 64) -> list[tuple[str, list[str]]]:
    """n PNG images under root/img/ and, for each, a caption as sentences (4 or 5 of them)."""
    from pictures import picture, write

    rng = random.Random(seed)
    (root / "img").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        bg, fg = rng.sample(COLOURS, 2)
        x, y = rng.randrange(0, size // 2), rng.randrange(0, size // 2)
        rel = f"img/{i:03d}.png"
        write(picture((size, size), RGB[bg], ("rectangle", (x, y, x + size // 3, y + size // 3), RGB[fg])), root / rel)
        sents = [
            f"The image shows a {fg} square on a {bg} background.",
            f"The square sits {x} pixels from the left.",
            f"It is {y} pixels from the top.",
            f"Scene number {i} is plain.",
        ]
        if i % 2:
            sents.append("Nothing else is visible.")
        out.append((rel, sents))
    return out


def write_prepared(folder: Path, rows: list[tuple[str, list[str]]], image_root: Path | None = None) -> Path:
    """A prepared folder made by the real `prepare` from a JSON-lines table of (image, caption)."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    table = folder.with_name(folder.name + ".jsonl")
    table.write_text(
        "".join(json.dumps({"image": image, "caption": " ".join(sents)}) + "\n" for image, sents in rows), "utf-8"
    )
    options = PrepareOptions(format="table", image_root=str(image_root) if image_root else None, quiet=True)
    manifest = prepare([table], folder, options)
    assert manifest["counts"]["written"] == len(rows), manifest["counts"]
    return folder
