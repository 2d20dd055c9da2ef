"""Page times and peak memory of `caption-debias view` on a generated 1.25M-row folder.

Generates (once, reused with --reuse) a prepared-style folder like bench_stats.py's (really
prepared rows sampled into 1.25M rows, zstd shards of 8,192-row groups) plus a removed.jsonl of
--removed lines (curate's shape: reasons, duplicate matches to kept keys), then in fresh
subprocesses:

  view   : the app as served (Starlette app, requests through its test client, JSON included):
           open + first page, the index, next pages, a source filter, a numeric range, a sort and
           its next page, a reason filter, a duplicate pair, a text search; peak RSS
  polars : baseline, each of those pages as one polars lazy scan over the shards
           (filter -> sort -> slice -> collect of the display columns), as a plain viewer would

and prints both with view/polars ratios. Thumbnails: one 1024 px JPEG made and then read from
the cache, timed separately.

    nice .venv/bin/python benchmarks/bench_view.py --work /tmp/view-bench --reuse

`--huge-thumbs` measures memory instead: one grid page (48 rows) whose pictures are 100-megapixel
PNGs of about half a megabyte (a single RGBA one by default, `--huge-kinds 3` adds an RGB and a
16-bit grey one), every thumbnail asked for at once, in fresh subprocesses:

  view     : the real app under uvicorn on a loopback port, 48 concurrent requests; peak RSS
  baseline : the decode view did per request before (Image.open, draft, exif_transpose, thumbnail,
             flatten alpha), on --baseline-threads threads at once (6: a browser's connections to one
             host), 48 decodes; peak RSS

    nice .venv/bin/python benchmarks/bench_view.py --work /tmp/view-bench --huge-thumbs
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import add_data_option

HERE = Path(__file__).resolve().parent
REASONS = ["image_missing", "repetitive_caption", "duplicate_image", "near_duplicate_caption"]

CHILD = r"""
import json, sys, time
from _common import peak_rss_mib
mode, folder = sys.argv[1], sys.argv[2]
out, cpu = {}, {}
def timed(name, fn):
    t0, c0 = time.perf_counter(), time.process_time()
    r = fn()
    out[name] = round(time.perf_counter() - t0, 3); cpu[name] = round(time.process_time() - c0, 3)
    return r
if mode == "view":
    timed("imports", lambda: __import__("caption_debias.view.app") and __import__("starlette.testclient"))
    from starlette.testclient import TestClient
    from caption_debias.view.app import create_app
    from caption_debias.view.data import ViewData
    from caption_debias.folder_rows.thumbs import ThumbCache
    import tempfile
    def first():
        data = ViewData([folder])
        client = TestClient(create_app(data, ThumbCache(tempfile.mkdtemp())))
        client.get("/api/page", params={"limit": 48}).raise_for_status()
        return data, client
    data, client = timed("open + first page", first)
    get = lambda **p: client.get("/api/page", params={"limit": 48, **p}).json()
    timed("index (background)", lambda: client.get("/api/meta").json())
    timed("next page", lambda: get(offset=48))
    timed("page 10,000", lambda: get(offset=480_000))
    timed("filter: source", lambda: get(source="coco"))
    timed("filter: num_tokens 100-200", lambda: get(range="num_tokens:100:200"))
    timed("sort: num_tokens desc", lambda: get(sort="num_tokens", desc=1))
    timed("sort: next page", lambda: get(sort="num_tokens", desc=1, offset=48))
    timed("filter: source + range + sort", lambda: get(source="docci", range="num_sentences:5:", sort="num_tokens"))
    page = timed("filter: reason", lambda: get(view="removed", reason="duplicate_image"))
    timed("duplicate pair", lambda: client.get("/api/pair", params={"f": 0, "removed": page["rows"][0]["id"].split("r")[1]}).json())
    hits = timed("text search (first time)", lambda: get(q="wooden"))
    timed("text search: next page", lambda: get(q="wooden", offset=48))
    out["text search: rows found, rows searched"] = f"{hits['at_least']:,} of {hits['searched']:,}"
elif mode == "polars":
    import polars as pl
    from caption_debias.dataset import PreparedDataset
    ds = PreparedDataset.open(folder)
    cols = ["key", "source", "image", "caption", "sentences", "summary_mask", "num_tokens"]
    scan = lambda: pl.scan_parquet([str(p) for p in ds.shard_paths])
    timed("open + first page", lambda: scan().select(cols).slice(0, 48).collect())
    timed("next page", lambda: scan().select(cols).slice(48, 48).collect())
    timed("page 10,000", lambda: scan().select(cols).slice(480_000, 48).collect())
    timed("filter: source", lambda: scan().filter(pl.col("source") == "coco").select(cols).slice(0, 48).collect())
    timed("filter: num_tokens 100-200", lambda: scan().filter(pl.col("num_tokens").is_between(100, 200)).select(cols).slice(0, 48).collect())
    timed("sort: num_tokens desc", lambda: scan().select(cols).sort("num_tokens", descending=True).slice(0, 48).collect())
    timed("sort: next page", lambda: scan().select(cols).sort("num_tokens", descending=True).slice(48, 48).collect())
    timed("filter: source + range + sort", lambda: scan().filter((pl.col("source") == "docci") & (pl.col("summary_mask").list.len() >= 5)).select(cols).sort("num_tokens").slice(0, 48).collect())
    timed("text search (first time)", lambda: scan().filter(pl.col("caption").str.to_lowercase().str.contains("wooden", literal=True)).select(cols).slice(0, 48).collect())
    timed("text search: next page", lambda: scan().filter(pl.col("caption").str.to_lowercase().str.contains("wooden", literal=True)).select(cols).slice(48, 48).collect())
elif mode == "thumbs":
    import tempfile
    from pathlib import Path
    from PIL import Image
    from caption_debias.folder_rows.thumbs import ThumbCache
    root = Path(tempfile.mkdtemp())
    im = Image.effect_mandelbrot((1024, 768), (-2, -1.2, 1, 1.2), 80).convert("RGB")
    im.save(root / "a.jpg", quality=90)
    cache = ThumbCache(root / "cache")
    timed("thumbnail: make (1024 px JPEG)", lambda: cache.for_file(root, "a.jpg"))
    timed("thumbnail: from cache", lambda: cache.for_file(root, "a.jpg"))
out["peak RSS MiB"] = round(peak_rss_mib())
print(json.dumps({"wall": out, "cpu": cpu}))
"""


HUGE = r"""
import io, json, sys, threading, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from _common import peak_rss_mib
mode, folder, images, threads = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
names = json.loads(sys.argv[5])
t0 = time.perf_counter()
if mode == "view":
    import tempfile, uvicorn
    from caption_debias.view.app import create_app
    from caption_debias.view.data import ViewData
    from caption_debias.view.server import bind
    from caption_debias.folder_rows.thumbs import ThumbCache
    sock = bind("127.0.0.1", 0)
    app = create_app(ViewData([str(folder)], str(images)), ThumbCache(tempfile.mkdtemp()))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    page = json.load(urllib.request.urlopen(url + "api/page?limit=48"))
    t0 = time.perf_counter()
    get = lambda row: urllib.request.urlopen(url + row["thumb"], timeout=900).read()
    with ThreadPoolExecutor(48) as pool:
        jpegs = list(pool.map(get, page["rows"]))
    assert all(j[:2] == b"\xff\xd8" for j in jpegs)
else:
    from PIL import Image, ImageOps
    def old_thumbnail(path):  # folder_rows/thumbs.py make_thumbnail before the image gate (the baseline)
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            im.draft("RGB", (256, 256))
            im = ImageOps.exif_transpose(im)
            im.thumbnail((256, 256))
            if im.mode not in ("RGB", "L"):
                im = im.convert("RGBA")
                flat = Image.new("RGB", im.size, (255, 255, 255))
                flat.paste(im, mask=im.getchannel("A"))
                im = flat
            out = io.BytesIO()
            im.save(out, "JPEG", quality=80, optimize=True)
            return out.getvalue()
    paths = [images / (names[0] if i % 16 else names[(i // 16) % len(names)]) for i in range(48)]
    with ThreadPoolExecutor(threads) as pool:
        jpegs = list(pool.map(old_thumbnail, paths))
print(json.dumps({"wall s": round(time.perf_counter() - t0, 2), "peak RSS MiB": round(peak_rss_mib())}))
"""


def huge_pngs(folder: Path, kinds: int) -> list[str]:
    """100-megapixel PNGs of about half a megabyte (flat, with one shape): RGBA, then RGB and 16-bit grey."""
    import numpy as np
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for mode, fill, name in (("RGBA", (200, 60, 60, 140), "rgba.png"), ("RGB", (40, 90, 160), "rgb.png"))[:kinds]:
        if not (folder / name).is_file():
            im = Image.new(mode, (10000, 10000), fill)
            ImageDraw.Draw(im).ellipse((2000, 2000, 8000, 8000), fill=(250, 250, 120, 255)[: len(mode)])
            im.save(folder / name, compress_level=9)
            del im
        names.append(name)
    if kinds >= 3:
        if not (folder / "grey16.png").is_file():
            grey = np.full((10000, 10000), 20000, np.uint16)
            grey[3000:7000, 3000:7000] = 50000
            Image.fromarray(grey).save(folder / "grey16.png", compress_level=9)
        names.append("grey16.png")
    return names


def huge_thumbs(work: Path, kinds: int, threads: int) -> None:
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = work / "huge-images"
    names = huge_pngs(images, kinds)
    rows = [
        {"key": f"h{i}", "image": names[0] if i % 16 else names[(i // 16) % len(names)], "caption": "A big picture."}
        for i in range(48)
    ]
    (work / "huge.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepare([work / "huge.jsonl"], work / "huge", PrepareOptions(format="table", quiet=True, overwrite=True))
    sizes = ", ".join(f"{n} {(images / n).stat().st_size / 1e6:.2f} MB" for n in names)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    out = {}
    for mode, n in (("view", 48), ("baseline", threads)):
        args = [sys.executable, "-c", HUGE, mode, str(work / "huge"), str(images), str(n), json.dumps(names)]
        proc = subprocess.run(args, capture_output=True, text=True, env=env)
        if proc.returncode:
            sys.exit(f"{mode} run failed:\n{proc.stderr}")
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"48 thumbnails of 100-megapixel PNGs ({sizes}); baseline on {threads} threads, view 48 requests at once")
    print("| | view | baseline (decode per request) | baseline / view |")
    print("|---|---|---|---|")
    for k in ("wall s", "peak RSS MiB"):
        print(f"| {k} | {out['view'][k]} | {out['baseline'][k]} | {out['baseline'][k] / out['view'][k]:.1f}x |")


def add_removed(folder: Path, count: int) -> None:
    """A removed.jsonl in curate's shape: removed keys not in the folder, duplicates matching kept keys."""
    import random

    rng = random.Random(0)
    rows = json.loads((folder / "manifest.json").read_text())["counts"]["written"]
    with open(folder / "removed.jsonl", "w", encoding="utf-8") as fh:
        for i in range(count):
            reason = REASONS[i % len(REASONS)]
            detail = {}
            if reason in ("duplicate_image", "near_duplicate_caption"):
                detail = {"match": f"bench/{rng.randrange(rows)}", "by": "image sha256", "similarity": 1.0}
            line = {
                "key": f"removed/{i}",
                "reason": reason,
                "detail": detail,
                "image": f"removed/{i}.jpg",
                "caption": "A removed caption that was shown here in its first 200 characters.",
                "input": str(folder),
            }
            fh.write(json.dumps(line) + "\n")


def browser_run(folder: Path, chromium: str) -> dict:
    """What a user waits for: `caption-debias view` started as a process, Chromium (Playwright) on its page;
    seconds from the process start to the first page's cards, then to each change's cards."""
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1360, "height": 900})
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from caption_debias.cli.main import main; main()",
                "view",
                str(folder),
                "--port",
                "0",
                "-q",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            url = proc.stdout.readline().split()[2]
            out["process start -> address printed"] = round(time.perf_counter() - t0, 2)
            page.goto(url)
            page.wait_for_selector(".card")
            out["process start -> first page's cards"] = round(time.perf_counter() - t0, 2)

            def change(name, action, status_has):
                t = time.perf_counter()
                action()
                page.wait_for_function("s => document.querySelector('#status').textContent.includes(s)", arg=status_has)
                page.wait_for_selector(".card")
                out[name] = round(time.perf_counter() - t, 2)

            page.wait_for_function("document.querySelectorAll('#sort option').length > 1")
            out["process start -> filters ready (index built)"] = round(time.perf_counter() - t0, 2)
            change("next page", lambda: page.click("#next"), "kept rows match")
            change("source filter", lambda: page.select_option("#source", "coco"), "kept rows match")
            change("sort by num_tokens", lambda: page.select_option("#sort", "num_tokens"), "kept rows match")
            change("next page (sorted)", lambda: page.click("#next"), "kept rows match")
            change(
                "removed: duplicate_image",
                lambda: (page.select_option("#source", ""), page.select_option("#rows", "removed:duplicate_image")),
                "removed",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            browser.close()
    return out


def run_child(mode: str, folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(folder)], capture_output=True, text=True, env=env)
    if proc.returncode:
        sys.exit(f"{mode} run failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_option(parser)
    parser.add_argument("--rows", type=int, default=1_250_000)
    parser.add_argument("--removed", type=int, default=50_000, help="lines of the generated removed.jsonl")
    parser.add_argument("--work", type=Path, default=Path("/tmp/view-bench"))
    parser.add_argument("--reuse", action="store_true", help="reuse WORK/big when it has --rows rows")
    parser.add_argument("--browser", default=None, help="also time the page in this Chromium (e.g. /usr/bin/chromium)")
    parser.add_argument("--huge-thumbs", action="store_true", help="peak memory of a page of 100-megapixel PNGs")
    parser.add_argument("--huge-kinds", type=int, default=1, choices=(1, 2, 3), help="--huge-thumbs: distinct PNGs")
    parser.add_argument("--baseline-threads", type=int, default=6, help="--huge-thumbs: the baseline's decodes at once")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.huge_thumbs:
        huge_thumbs(args.work, args.huge_kinds, args.baseline_threads)
        return
    big = args.work / "big"
    manifest = big / "manifest.json"
    t0 = time.perf_counter()
    if not (args.reuse and manifest.is_file() and json.loads(manifest.read_text())["counts"]["written"] == args.rows):
        from bench_stats import build_big

        big = build_big(args.work, args.rows, args.data)
        add_removed(big, args.removed)
    size = sum(p.stat().st_size for p in (big / "shards").iterdir())
    print(f"folder: {args.rows:,} rows, {size / 2**20:,.0f} MiB of shards ({time.perf_counter() - t0:.0f} s to make)")
    load = os.getloadavg()[0]
    view, base, thumbs = run_child("view", big), run_child("polars", big), run_child("thumbs", big)
    print(f"load average before the runs: {load:.1f} (2 cores)")
    print("| step | view wall s | view CPU s | polars wall s | polars CPU s | ratio (CPU) |")
    print("|---|---|---|---|---|---|")
    for step, v in view["wall"].items():
        c, bw, bc = view["cpu"].get(step), base["wall"].get(step), base["cpu"].get(step)
        ratio = f"{bc / c:.1f}x" if isinstance(bc, float) and c else ""
        cells = ["" if x is None else x for x in (v, c, bw, bc)]
        print(f"| {step} | {' | '.join(map(str, cells))} | {ratio} |")
    for step, v in thumbs["wall"].items():
        print(f"| {step} | {v} | {thumbs['cpu'].get(step, '')} | | | |")
    print(json.dumps({"view": view, "polars": base, "thumbs": thumbs}))
    if args.browser:
        for step, seconds in browser_run(big, args.browser).items():
            print(f"| browser: {step} | {seconds} |")


if __name__ == "__main__":
    main()
