"""A scored folder without a model: a prepared folder with the columns `caption-debias score` writes set by hand.

The shards are rewritten as real Parquet (the shard schema, zstd) and the manifest's sha256s
follow, so every reader treats the copy as the scored folder `score` would make.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from eval_fixtures import make_images

from caption_debias.prepare.writer import write_shard
from caption_debias.schema import shard_arrow_schema
from caption_debias.score.options import ScoreOptions
from caption_debias.score.run import score_folder


def with_scores(src: Path, dst: Path, columns: dict[str, list[Any]]) -> Path:
    """Copy prepared/curated folder SRC to DST with per-row `columns` (global row order) replaced."""
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text("utf-8"))
    schema = shard_arrow_schema()
    start = 0
    for entry in manifest["shards"]:
        path = dst / entry["path"]
        table = pq.read_table(path)
        n = table.num_rows
        for name, values in columns.items():
            field = schema.field(name)
            array = pa.array(values[start : start + n], field.type)
            table = table.set_column(table.schema.get_field_index(name), field, array)
        entry["sha256"] = write_shard(table, path)
        start += n
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", "utf-8")
    return dst


def read_rows(folder: Path, columns: list[str]) -> dict[str, list[Any]]:
    manifest = json.loads((folder / "manifest.json").read_text("utf-8"))
    tables = [pq.read_table(folder / s["path"], columns=columns) for s in manifest["shards"]]
    if not tables:
        return {c: [] for c in columns}
    return pa.concat_tables(tables).to_pydict()


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def tiny_scored(root: Path, n: int, copies: dict[int, int], seed: int = 0) -> dict[str, Any]:
    """A folder scored by the real `score` (the shipped tiny open_clip model, seeded weights on file,
    --keep-embeddings) from a real prepared folder of `n` rows with real PNGs. Row `c` of `copies`
    shows the same picture as row `copies[c]` (the file copied under another name), so its image
    embedding equals that row's: a semantic duplicate at cosine 1.

    Returns root, images, prepared, scored, weights and the scored folder's key order.
    """
    import random

    import open_clip
    import torch
    from curate_fixtures import caption
    from pictures import scene, write

    from caption_debias.model.load import register_shipped_configs
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.score.options import ScoreOptions

    images = root / "images"
    images.mkdir(parents=True)
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        name = f"{i:03d}.png"
        if i in copies:
            shutil.copyfile(images / f"{copies[i]:03d}.png", images / name)
        else:
            write(scene(1000 * seed + i), images / name)
        rows.append({"key": f"r{i:03d}", "image": name, "caption": caption(rng, rng.randrange(3, 6))})
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([root / "rows.jsonl"], root / "prepared", PrepareOptions(format="table", shard_rows=16, quiet=True))
    register_shipped_configs()
    torch.manual_seed(seed)
    weights = root / "tiny.pt"
    torch.save(open_clip.create_model("tiny").state_dict(), weights)
    options = ScoreOptions(
        model="tiny", pretrained=str(weights), image_root=str(images), keep_embeddings=True, batch_size=16, quiet=True
    )
    score_folder([root / "prepared"], root / "scored", options)
    keys = read_rows(root / "scored", ["key"])["key"]
    assert len(keys) == n  # every image was readable: the scored folder holds every row
    return {
        "root": root,
        "images": images,
        "prepared": root / "prepared",
        "scored": root / "scored",
        "weights": weights,
        "keys": keys,
    }


def edited(src: Path, dst: Path, rows: dict[str, dict[int, Any]]) -> Path:
    """A copy of scored folder SRC with the given rows' values replaced: {column: {row: value}}."""
    values = read_rows(src, list(rows))
    for column, changes in rows.items():
        for i, v in changes.items():
            values[column][i] = v
    return with_scores(src, dst, values)


def build_world(tmp_path_factory):
    """24 images with 4-5 sentence captions (two of them longer than 77 tokens), 4 shards, tiny weights on file."""
    import open_clip
    import torch

    from caption_debias.model.load import register_shipped_configs

    root = tmp_path_factory.mktemp("score")
    rows = make_images(root, ROWS)
    rows[3] = (rows[3][0], [*rows[3][1], LONG])
    rows[10] = (rows[10][0], [*rows[10][1], LONG])
    table = root / "rows.jsonl"
    table.write_text("".join(json.dumps({"image": i, "caption": " ".join(s)}) + "\n" for i, s in rows), "utf-8")
    prepared = prepare_for_score(table, root / "prepared", root)
    register_shipped_configs()
    torch.manual_seed(1)
    model = open_clip.create_model("tiny")
    weights = root / "tiny.pt"
    torch.save(model.state_dict(), weights)
    return {"root": root, "images": root, "prepared": prepared, "rows": rows, "weights": weights, "table": table}


def score_opts(world, **kw) -> ScoreOptions:
    return ScoreOptions(
        model="tiny", pretrained=str(world["weights"]), image_root=str(world["images"]), batch_size=8, quiet=True, **kw
    )


LONG = (
    "Along the far wall a row of tall wooden shelves holds jars, tins, folded cloths, coiled ropes, "
    "brass lamps, painted bowls, stacked plates, small clocks, glass bottles and baskets of dried flowers, "
    "each item set a little apart from the next one so that every shelf looks evenly filled."
)


ROWS = 24


def prepare_for_score(table: Path, out: Path, image_root: Path) -> Path:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    prepare([table], out, PrepareOptions(format="table", image_root=str(image_root), shard_rows=SHARD_ROWS, quiet=True))
    return out


SHARD_ROWS = 6
