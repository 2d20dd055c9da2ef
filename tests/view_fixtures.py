"""Folders for the viewer tests: a curated world (curate_fixtures), a scored copy whose shards carry
the scorers' columns and embedded image bytes (written here into real Parquet), and a prepared folder
whose image paths try to leave the image root."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def curated_world(root: Path) -> dict:
    from curate_fixtures import make_world

    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate

    world = make_world(root / "world")
    out = root / "curated"
    opts = CurateOptions(image_root=str(world["images"]), decontaminate=[f"urban1k={world['eval']}"], quiet=True)
    curate([world["prepared"]], out, opts)
    return {**world, "curated": out}


def scored_copy(curated: Path, images: Path, out: Path) -> Path:
    """The curated folder with clip_score, sentence_scores, sentence_grounding, sentence_keep and
    image_bytes filled in (as the scorers and curate --embed-images would), the manifest's shards updated."""
    shutil.copytree(curated, out)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["shards"]:
        path = out / entry["path"]
        t = pq.read_table(path)
        n_sent = [len(s) for s in t.column("sentences").to_pylist()]
        grounding = [[round(0.1 + 0.8 * ((i * 7 + r) % 5) / 4, 3) for i in range(n)] for r, n in enumerate(n_sent)]
        keep = [[i != 1 for i in range(n)] for n in n_sent]  # the second sentence of every caption dropped
        scores = [[g - 0.05 for g in row] for row in grounding]
        clip = [0.2 + 0.01 * r for r in range(t.num_rows)]
        blobs = [(images / im).read_bytes() for im in t.column("image").to_pylist()]
        for name, column in (
            ("image_bytes", pa.array(blobs, pa.binary())),
            ("clip_score", pa.array(clip, pa.float32())),
            ("sentence_scores", pa.array(scores, pa.list_(pa.float32()))),
            ("sentence_grounding", pa.array(grounding, pa.list_(pa.float32()))),
            ("sentence_keep", pa.array(keep, pa.list_(pa.bool_()))),
        ):  # the schema's nullable columns are there (null) in a curated folder: fill them, else add them
            at = t.schema.get_field_index(name)
            t = t.set_column(at, name, column) if at >= 0 else t.append_column(name, column)
        pq.write_table(t, path, compression="zstd")
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest.get("options", {})["image_root"] = None  # thumbnails must come from image_bytes
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    (out / "removed.jsonl").unlink()
    return out


def escaping_folder(root: Path) -> dict:
    """A prepared folder whose image paths climb out (../), are absolute, or are symlinks pointing out."""
    from pictures import scene, write

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    images.mkdir(parents=True)
    secret = root / "secret.jpg"
    write(scene(1), secret)
    write(scene(2), images / "inside.jpg")
    (images / "link_out.jpg").symlink_to(secret)
    rows = [
        {"key": "inside", "image": "inside.jpg", "caption": "A red kite. It flies over the hill."},
        {"key": "climb", "image": "climb.jpg", "caption": "A blue boat. It floats on the lake."},
        {"key": "absolute", "image": "absolute.jpg", "caption": "A green lamp. It glows at night."},
        {"key": "symlink", "image": "link_out.jpg", "caption": "A grey cat. It sleeps on a bench."},
        {"key": "gone", "image": "gone.jpg", "caption": "A white dog. It runs on the beach."},
    ]
    table = root / "table.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepared = root / "prepared"
    prepare([table], prepared, PrepareOptions(format="table", quiet=True))
    # prepare rejects such paths; a folder edited by hand or by another tool may still hold them
    bad = {"climb.jpg": "../secret.jpg", "absolute.jpg": str(secret)}
    manifest = json.loads((prepared / "manifest.json").read_text())
    for entry in manifest["shards"]:
        path = prepared / entry["path"]
        t = pq.read_table(path)
        paths = [bad.get(i, i) for i in t.column("image").to_pylist()]
        t = t.set_column(t.schema.get_field_index("image"), t.schema.field("image"), pa.array(paths, pa.string()))
        pq.write_table(t, path, compression="zstd")
        data = path.read_bytes()  # the manifest stays true to the edited shard (readers check its digest)
        entry.update(
            {k: v for k, v in (("sha256", hashlib.sha256(data).hexdigest()), ("bytes", len(data))) if k in entry}
        )
    (prepared / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    return {"prepared": prepared, "images": images, "secret": secret}


def mtimes(*folders: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under the given folders with its mtime and size: equal before and after = nothing written."""
    out = {}
    for folder in folders:
        for p in [folder, *sorted(folder.rglob("*"))]:
            st = p.lstat()
            out[str(p)] = (st.st_mtime_ns, st.st_size)
    return out


class Server:
    """The real app under uvicorn on a free loopback port, in a thread (stopped on exit)."""

    def __init__(self, folders, image_root=None, thumbs_dir=None, tags=None, text_search=None):
        import uvicorn

        from caption_debias.folder_rows.thumbs import ThumbCache
        from caption_debias.view.app import create_app
        from caption_debias.view.data import ViewData
        from caption_debias.view.server import bind

        self.data = ViewData([str(f) for f in folders], None if image_root is None else str(image_root))
        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        app = create_app(self.data, ThumbCache(thumbs_dir), tags=tags, text_search=text_search)
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


PWNED = "pwned"  # what a hostile script would set the page's title to
HOSTILE_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" onload="document.title=\'pwned\'" width="10" height="10">'
    "<script>document.title = 'pwned'; fetch('/api/meta').then(r => r.text()).then(t => document.title = 'pwned')</script>"
    "</svg>"
)


def _rewrite_shards(folder: Path, edit) -> None:
    """Apply edit(table) -> table to every shard, keeping the manifest's digests true (readers check them)."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for entry in manifest["shards"]:
        path = folder / entry["path"]
        pq.write_table(edit(pq.read_table(path)), path, compression="zstd")
        data = path.read_bytes()
        entry.update(
            {k: v for k, v in (("sha256", hashlib.sha256(data).hexdigest()), ("bytes", len(data))) if k in entry}
        )
    (folder / "manifest.json").write_text(json.dumps(manifest), "utf-8")


def hostile_folder(root: Path) -> dict:
    """A prepared folder made curated by a removed.jsonl, holding what a dataset may hold: markup, `</script>`,
    `<!--<script>`, U+2028 and lone surrogates in captions, keys, paths, reasons and details; NaN and infinite
    scores; `javascript:` and `data:` image "URLs"; an SVG with a script stored in the image root."""
    from pictures import not_a_picture, scene, write

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    images.mkdir(parents=True)
    (images / "evil.svg").write_text(HOSTILE_SVG, "utf-8")
    not_a_picture(images / "svg_named.png", HOSTILE_SVG)  # an SVG whose name says PNG
    write(scene(5), images / "real.png")
    hostile = "<img src=x onerror=\"document.title='pwned'\">"
    rows = [
        {
            "key": '"><svg onload="document.title=\'pwned\'">',
            "image": "real.png",
            "caption": "<!--<script> A red kite flies. It is high.",
        },
        {
            "key": "closer",
            "image": "evil.svg",
            "caption": "</script><script>document.title='pwned'</script> A boat. It floats.",
        },
        {
            "key": "lines",
            "image": "javascript://%0Adocument.title='pwned'",
            "caption": "Line\u2028sep\u2029para. A cat. " + hostile,
        },
        {
            "key": "data_url",
            "image": "data:text/html,<script>document.title='pwned'</script>",
            "caption": "A lamp. It glows.",
        },
        {"key": "named", "image": "svg_named.png", "caption": "A dog runs. It is fast. ]]> --> <![CDATA["},
        {"key": "plain", "image": "real.png", "caption": "A plain caption. It has two sentences."},
    ]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    folder = root / "hostile"
    prepare([root / "t.jsonl"], folder, PrepareOptions(format="table", quiet=True))
    scores = [float("nan"), float("inf"), float("-inf"), 0.5, 0.25, 0.75]

    def with_scores(t):
        column = pa.array(scores[: t.num_rows], pa.float32())
        at = t.schema.get_field_index("clip_score")
        return t.set_column(at, "clip_score", column) if at >= 0 else t.append_column("clip_score", column)

    _rewrite_shards(folder, with_scores)
    removed = [
        {
            "key": "table/r_reason",
            "reason": "</option><script>document.title='pwned'</script>" + hostile,
            "detail": {"match": "table/plain", "by": hostile, "similarity": 0.9, "note": "\ud800 lone surrogate"},
            "image": "evil.svg",
            "caption": "<!--<script> removed",
            "input": "",
        },
        {
            "key": "table/r_plain",
            "reason": "duplicate_image",
            "detail": {"match": "table/closer", "by": "image sha256", "similarity": 1.0},
            "image": "../outside.png",
            "caption": "\u2028</script>",
            "input": "",
        },
    ]
    with open(folder / "removed.jsonl", "w", encoding="utf-8") as fh:
        for line in removed:
            fh.write(json.dumps(line) + "\n")  # ensure_ascii: the lone surrogate as its \\ud800 escape
    return {"folder": folder, "images": images, "rows": len(rows), "removed": len(removed)}


def many_rows_folder(root: Path, n: int = 240) -> Path:
    """A prepared folder of n rows in shards of 8 rows (many row groups: searches stop early, pages
    prefetch), with a few real images."""
    import random

    from curate_fixtures import caption
    from pictures import scene, write

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    images.mkdir(parents=True)
    for i in range(6):
        write(scene(700 + i), images / f"m{i}.jpg", quality=85)
    rng = random.Random(11)
    rows = [{"key": f"m{i}", "image": f"m{i % 6}.jpg", "caption": caption(rng, 3 + i % 5)} for i in range(n)]
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare(
        [root / "t.jsonl"],
        root / "many",
        PrepareOptions(format="table", quiet=True, shard_rows=8, image_root=str(images)),
    )
    return root / "many"


def planted_world(root: Path, n: int = 40) -> dict:
    """The real pipeline on a tiny planted world: synth --plant -> prepare -> score (the shipped demo-start
    model, --keep-embeddings) -> curate --drop-ungrounded 0 --min-clip-score 0.1. Returns its folders."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder
    from caption_debias.synth.options import SynthOptions
    from caption_debias.synth.world import run_synth

    world = root / "world"
    run_synth(world, SynthOptions(n=n, plant=True, quiet=True))
    prepare([world / "sharegpt4v.json"], root / "prepared", PrepareOptions(quiet=True))
    score_folder(
        [root / "prepared"],
        root / "scored",
        ScoreOptions(model="demo-start", image_root=str(world), keep_embeddings=True, quiet=True),
    )
    options = CurateOptions(drop_ungrounded=0.0, min_clip_score=0.1, quiet=True)
    curate([root / "scored"], root / "curated", options)
    return {
        "world": world,
        "prepared": root / "prepared",
        "scored": root / "scored",
        "curated": root / "curated",
        "curate_options": options,
    }


def embedding_folder(src: Path, out: Path, rows: int, dim: int, rng, shard_rows: int = 32_768) -> Path:
    """A folder of `rows` rows sampled from the prepared folder `src` (new keys, three sources) with
    `dim`-d float16 image embeddings around 12 random centres (random data: the map's cost, not its
    meaning), written as real Parquet shards of the shard schema with a manifest readers accept."""
    import numpy as np
    from folder_factory import write_manifest, write_shards

    from caption_debias.dataset import PreparedDataset
    from caption_debias.schema import shard_arrow_schema

    schema = shard_arrow_schema()
    pool = PreparedDataset.open(src).read()
    pool = pa.table(
        {
            f.name: pool.column(f.name) if f.name in pool.column_names else pa.nulls(pool.num_rows, f.type)
            for f in schema
        },
        schema=schema,
    )
    centres = rng.standard_normal((12, dim)).astype(np.float32)
    sources = np.array(["sharegpt4v", "coco", "docci"])

    def tables():
        for lo in range(0, rows, shard_rows):
            count = min(shard_rows, rows - lo)
            table = pool.take(pa.array(rng.integers(0, pool.num_rows, count)))
            table = table.set_column(
                schema.get_field_index("key"), "key", pa.array([f"bench/{i}" for i in range(lo, lo + count)])
            )
            table = table.set_column(
                schema.get_field_index("source"), "source", pa.array(sources[rng.integers(0, 3, count)])
            )
            x = centres[rng.integers(0, len(centres), count)]
            x += rng.standard_normal((count, dim), dtype=np.float32) * 0.7
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            offsets = pa.array(np.arange(0, (count + 1) * dim, dim, dtype=np.int32))
            emb = pa.ListArray.from_arrays(offsets, pa.array(x.astype(np.float16).ravel()))
            yield table.set_column(schema.get_field_index("image_embedding"), schema.field("image_embedding"), emb)

    shutil.rmtree(out, ignore_errors=True)
    (out / "shards").mkdir(parents=True)
    # the embeddings without a dictionary: random float16 values make one, which only slows writing and reading
    plain = [f.name for f in schema if f.name != "image_embedding"]
    shards = write_shards(out, tables(), "shards/part-{:05d}.parquet", row_group_size=8192, use_dictionary=plain)
    return write_manifest(out, shards, {}, "synthetic embeddings")


def app_client(folders, image_root=None, **app_kw):
    """A Starlette test client on the real app over these folders (create_app's keywords: tags, text_search)."""
    from starlette.testclient import TestClient

    from caption_debias.view.app import create_app
    from caption_debias.view.data import ViewData

    data = ViewData([str(f) for f in folders], None if image_root is None else str(image_root))
    return TestClient(create_app(data, **app_kw), base_url="http://127.0.0.1")


def text_and_embedding_folder(root: Path, n: int = 48, dim: int = 16) -> Path:
    """A prepared folder curate finds nothing in at its defaults but for the text-quality cuts the page
    moves: distinct pictures and captions; some captions repeat a sentence once or twice, some repeat
    phrases (caption_repetition); image_embedding and caption_embedding (float16, unit length) hold
    near-copies (pairs and a chain of three: which row of a pair stays matters) and one NaN vector
    (invalid_signal once SemDeDup reads the column)."""
    import random

    import numpy as np
    from curate_fixtures import caption
    from pictures import scene, write

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    images.mkdir(parents=True)
    rng = random.Random(5)
    rows = []
    for i in range(n):
        write(scene(900 + i), images / f"t{i}.jpg", quality=85)
        text = caption(rng, 3 + i % 4)
        first = text.split(". ")[0].rstrip(".") + "."
        if i % 7 == 3:
            text = f"{text} {first}"  # one repeated sentence
        elif i % 7 == 5:
            text = f"{text} {first} {first}"  # two
        elif i % 5 == 1:
            words = first.rstrip(".").split()
            text = f"{text} The {' '.join(words[:4])} and the {' '.join(words[:4])} again."  # a repeated phrase
        rows.append({"key": f"t{i}", "image": f"t{i}.jpg", "caption": text})
    (root / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    out = root / "prepared"
    prepare([root / "t.jsonl"], out, PrepareOptions(format="table", quiet=True, shard_rows=20, image_root=str(images)))
    vectors = np.random.default_rng(3).standard_normal((2, n, dim)).astype(np.float32)
    for a, b, noise in ((2, 9, 0.05), (9, 30, 0.08), (14, 15, 0.12), (20, 41, 0.3), (33, 27, 0.02)):
        vectors[:, b] = vectors[:, a] + noise * np.random.default_rng(b).standard_normal(dim)
    vectors /= np.linalg.norm(vectors, axis=2, keepdims=True)
    vectors[0, 22] = np.nan  # an image embedding curate refuses
    done = [0]

    def embed(t: pa.Table) -> pa.Table:
        lo = done[0]
        done[0] += t.num_rows
        for k, name in enumerate(("image_embedding", "caption_embedding")):
            x = vectors[k, lo : lo + t.num_rows].astype(np.float16)
            offsets = pa.array(np.arange(0, (t.num_rows + 1) * dim, dim, dtype=np.int32))
            column = pa.ListArray.from_arrays(offsets, pa.array(x.ravel()))
            at = t.schema.get_field_index(name)
            t = t.set_column(at, name, column) if at >= 0 else t.append_column(name, column)
        return t

    _rewrite_shards(out, embed)
    return out
