"""Small fixtures shared by the eval and probe tests: synthetic images and a prepared folder."""

from __future__ import annotations

import json
import random
from pathlib import Path

COLOURS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]
RGB = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 230), "yellow": (240, 220, 40),
       "purple": (150, 50, 200), "orange": (250, 140, 20), "white": (245, 245, 245), "black": (20, 20, 20)}


def make_images(root: Path, n: int, seed: int = 0, size: int = 64) -> list[tuple[str, list[str]]]:
    """n PNG images under root/img/ and, for each, a caption as sentences (4 or 5 of them)."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    (root / "img").mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        bg, fg = rng.sample(COLOURS, 2)
        im = Image.new("RGB", (size, size), RGB[bg])
        x, y = rng.randrange(0, size // 2), rng.randrange(0, size // 2)
        ImageDraw.Draw(im).rectangle([x, y, x + size // 3, y + size // 3], fill=RGB[fg])
        rel = f"img/{i:03d}.png"
        im.save(root / rel)
        sents = [f"The image shows a {fg} square on a {bg} background.",
                 f"The square sits {x} pixels from the left.",
                 f"It is {y} pixels from the top.",
                 f"Scene number {i} is plain."]
        if i % 2:
            sents.append("Nothing else is visible.")
        out.append((rel, sents))
    return out


def write_prepared(folder: Path, rows: list[tuple[str, list[str]]], image_root: Path | None = None) -> Path:
    """A prepared folder written directly with pyarrow against the shard schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from caption_debias.schema import SCHEMA_VERSION, shard_arrow_schema
    from caption_debias.text.tokenize import get_tokenizer

    tok = get_tokenizer()
    folder.mkdir(parents=True, exist_ok=True)
    cols = {c: [] for c in shard_arrow_schema().names}
    for i, (image, sents) in enumerate(rows):
        caption = " ".join(sents)
        spans, pos = [], 0
        for s in sents:
            start = caption.index(s, pos)
            spans.append({"start": start, "end": start + len(s)})
            pos = start + len(s)
        ids = tok.encode_batch(sents)
        cols["key"].append(f"test/{i}")
        cols["source"].append("table")
        cols["split"].append(None)
        cols["image"].append(image)
        cols["caption"].append(caption)
        cols["sentences"].append(sents)
        cols["sentence_spans"].append(spans)
        cols["sentence_tokens"].append(ids)
        cols["num_tokens"].append(len(tok.encode(caption)) + 2)
        cols["summary_mask"].append([j == 0 for j in range(len(sents))])
        cols["summary_scores"].append([1.0 if j == 0 else 0.0 for j in range(len(sents))])
        cols["meta"].append("{}")
    table = pa.Table.from_pydict(cols, schema=shard_arrow_schema())
    pq.write_table(table, folder / "shard-00000.parquet")
    manifest = {"schema_version": SCHEMA_VERSION, "complete": True,
                "counts": {"read": len(rows), "written": len(rows), "rejected": 0},
                "inputs": [], "shards": [{"path": "shard-00000.parquet", "rows": len(rows), "sha256": "0" * 64}],
                "options": {"image_root": str(image_root) if image_root else None},
                "tokenizer": tok.describe(), "segmenter": {"name": "fast"}, "toolkit_version": "test"}
    (folder / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    return folder
