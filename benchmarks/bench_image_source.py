"""The image source: images read and decoded from local tars, against the same images as loose files,
against webdataset's own WebDataset iteration, and from an S3 store (moto on 127.0.0.1).

Writes N synthetic JPEGs (img2dataset-like sides, 256-512 px, quality 90) once as loose files
(NNNNN/KEY.jpg) and once as webdataset tars of --per-tar samples (KEY.jpg + KEY.json, written by
webdataset's TarWriter: the same bytes), then times, best of --repeats, interleaved:
  loose:      ImageSource(loose root).map(rows, fn)             (one file read per row)
  tars:       ImageSource(tar root).map(rows, fn)               (one pass per tar)
  webdataset: wds.WebDataset(tars, shardshuffle=False), fn on each sample's jpg (the reference reader)
  s3:         ImageSource(s3://bucket/tars).map(rows, fn)       (with --s3: moto's server, counting bytes)
with fn = image_files.decode_rgb (the one decode every stage uses) and fn = len (reading alone),
or with --fns curate score the stages' own per-image work (curate's image facts: size, sha256,
phash; score's draft decode and open_clip eval transform),
at --threads 1 (every path sequential, as WebDataset iterates) and at --threads N for the
source's pool. Each ratio is the median over repeats of the paired wall-time ratios (with their
range). Targets: tars / loose >= 0.9, tars / webdataset >= 1.0 (decode, one thread).

    .venv/bin/python benchmarks/bench_image_source.py --n 600 --per-tar 100 --threads 1 4 --repeats 3 --s3
    .venv/bin/python benchmarks/bench_image_source.py --fns curate score --threads 1 2 --repeats 3 --s3
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import _common  # noqa: E402, F401  (image_worlds importable: the counting moto server)


def make_world(folder: Path, n: int, per_tar: int) -> tuple[list[str], list[str]]:
    """(loose refs, tar refs) of the same N images; files written once and reused."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter
    from webdataset import TarWriter

    loose_refs, tar_refs, pending = [], [], []
    for i in range(n):
        shard, key = f"{i // per_tar:05d}", f"{i:09d}"
        loose_refs.append(f"{shard}/{key}.jpg")
        tar_refs.append(f"{shard}.tar#{key}.jpg")
        path = folder / "loose" / loose_refs[-1]
        if not path.exists():
            r = random.Random(i)
            w, h = r.randint(256, 512), r.randint(256, 512)
            im = Image.new("RGB", (w, h), tuple(r.randrange(256) for _ in range(3)))
            d = ImageDraw.Draw(im)
            for _ in range(12):
                x, y, s = r.randrange(w), r.randrange(h), r.randrange(20, 200)
                d.ellipse((x, y, x + s, y + s * 0.7), fill=tuple(r.randrange(256) for _ in range(3)))
            noise = np.random.default_rng(i).integers(-8, 8, (h, w, 3))
            arr = (np.asarray(im.filter(ImageFilter.GaussianBlur(1))).astype(np.int16) + noise).clip(0, 255)
            path.parent.mkdir(parents=True, exist_ok=True)
            buf = io.BytesIO()
            Image.fromarray(arr.astype(np.uint8)).save(buf, "JPEG", quality=90)
            path.write_bytes(buf.getvalue())
        pending.append((shard, key, path))
    (folder / "tars").mkdir(exist_ok=True)
    for shard in sorted({s for s, _, _ in pending}):
        tar = folder / "tars" / f"{shard}.tar"
        if tar.exists():
            continue
        with TarWriter(str(tar), mtime=0) as sink:
            for s, key, path in pending:
                if s == shard:
                    sink.write({"__key__": key, "jpg": path.read_bytes(), "json": json.dumps({"key": key}).encode()})
    return loose_refs, tar_refs


def decode(data: bytes, name: str):
    from caption_debias.image_files import decode_rgb

    return decode_rgb(data, name).size


def length(data: bytes, name: str) -> int:
    return len(data)


def curate_facts(data: bytes, name: str):
    """curate's image facts (size, sha256, draft-decoded grey, phash): what its signal step applies."""
    from caption_debias.curate.images import facts_of_bytes

    return facts_of_bytes(data, name)


_PREPROCESS = []


def score_decode(data: bytes, name: str):
    """score's decode: draft-decoded RGB and open_clip's eval transform at 224 (ViT-B-16's)."""
    from caption_debias.score.encode import decode_bytes

    if not _PREPROCESS:
        from open_clip.transform import image_transform

        _PREPROCESS.append(image_transform(224, is_train=False))
    return decode_bytes(data, name, _PREPROCESS[0], draft_side=224)


FNS = {"decode": decode, "read": length, "curate": curate_facts, "score": score_decode}


def time_source(root, refs: list[str], fn, threads: int) -> tuple[tuple[float, float], object]:
    """((wall, CPU) seconds, the source) of one batch of every row."""
    from caption_debias.image_source import ImageSource

    source = ImageSource(root)  # the root resolved (and an S3 client connected) before the clock starts
    start, cpu = time.perf_counter(), time.process_time()
    out = source.map(refs, fn, threads=threads)
    elapsed = (time.perf_counter() - start, time.process_time() - cpu)
    assert not any(isinstance(r, Exception) for r in out), next(r for r in out if isinstance(r, Exception))
    return elapsed, source


def time_webdataset(tars: list[str], fn, n: int) -> tuple[float, float]:
    import webdataset as wds

    start, cpu = time.perf_counter(), time.process_time()
    done = sum(1 for s in wds.WebDataset(tars, shardshuffle=False) if fn(s["jpg"], s["__key__"]) is not None)
    elapsed = (time.perf_counter() - start, time.process_time() - cpu)
    assert done == n, (done, n)
    return elapsed


def measure(folder: Path, refs: tuple[list[str], list[str]], args, s3_root: str | None) -> dict[str, dict]:
    """Every path's (wall, CPU) seconds per repeat, interleaved: a busy machine slows every path of a repeat alike."""
    loose_refs, tar_refs = refs
    tars = sorted(str(p) for p in (folder / "tars").glob("*.tar"))
    runs: dict[str, list[tuple[float, float]]] = {}
    fetched: dict[str, int] = {}
    for _ in range(args.repeats):
        for fname, fn in ((f, FNS[f]) for f in args.fns):
            for t in args.threads:
                paths = [("loose", folder / "loose", loose_refs), ("tars", folder / "tars", tar_refs)]
                paths += [("s3", s3_root, tar_refs)] if s3_root is not None else []
                for name, root, rows in paths:
                    elapsed, source = time_source(root, rows, fn, t)
                    runs.setdefault(f"{fname}/{name}/{t}", []).append(elapsed)
                    fetched[f"{fname}/{name}/{t}"] = sum(source.stats.fetched.values())
            runs.setdefault(f"{fname}/webdataset/1", []).append(time_webdataset(tars, fn, len(tar_refs)))
    return {"runs": runs, "fetched": fetched}


def report(result: dict, n: int, tar_bytes: int, threads: list[int], server_bytes: int | None, fns: list[str]) -> None:
    """Images/s of each path (its fastest repeat) and CPU microseconds per image (median), then how many
    times faster tars are than each other path: the median over repeats of the paired wall ratios."""
    runs = result["runs"]
    repeats = len(runs[f"{fns[0]}/tars/{threads[0]}"])
    print(f"{n} images, {tar_bytes / n / 1024:.1f} KiB per image in the tars, {repeats} repeats")
    for fname in fns:
        for t in threads:
            paths = [p for p in ("loose", "tars", "webdataset", "s3") if f"{fname}/{p}/{t}" in runs]
            rates = "  ".join(
                f"{p} {n / min(w for w, _ in runs[f'{fname}/{p}/{t}']):6.0f}/s "
                f"({statistics.median(c for _, c in runs[f'{fname}/{p}/{t}']) / n * 1e6:.0f} us CPU)"
                for p in paths
            )
            print(f"{fname:6s} threads={t}: {rates}")
            tars = runs[f"{fname}/tars/{t}"]
            others = [p for p in ("loose", "webdataset") if f"{fname}/{p}/{t}" in runs]
            line = "  ".join(f"tars/{p} {_paired(runs[f'{fname}/{p}/{t}'], tars)}" for p in others)
            if f"{fname}/s3/{t}" in runs:
                fetched = result["fetched"][f"{fname}/s3/{t}"] / n / 1024
                line += f"  s3/tars {_paired(tars, runs[f'{fname}/s3/{t}'])}  fetched per image {fetched:.1f} KiB"
            print(f"    {line}")
    if server_bytes is not None:
        print(f"moto server: bytes sent for tar GETs per pass per image {server_bytes / n / 1024:.1f} KiB")


def _paired(slow: list[tuple[float, float]], fast: list[tuple[float, float]]) -> str:
    """slow / fast wall time, repeat by repeat: the median, and the range."""
    ratios = sorted(a[0] / b[0] for a, b in zip(slow, fast))
    return f"{statistics.median(ratios):.2f}x [{ratios[0]:.2f}-{ratios[-1]:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=600)
    parser.add_argument("--per-tar", type=int, default=100)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "bench-image-source")
    parser.add_argument("--s3", action="store_true", help="also read the tars from moto's S3 server on 127.0.0.1")
    parser.add_argument(
        "--fns",
        nargs="+",
        choices=sorted(FNS),
        default=["decode", "read"],
        help="what is applied to each image: decode (image_files.decode_rgb), read (bytes alone), "
        "curate (curate's image facts), score (score's decode and eval transform)",
    )
    args = parser.parse_args()
    folder = args.dir / f"n{args.n}-t{args.per_tar}"
    refs = make_world(folder, args.n, args.per_tar)
    tar_bytes = sum(p.stat().st_size for p in (folder / "tars").glob("*.tar"))
    if not args.s3:
        report(measure(folder, refs, args, None), args.n, tar_bytes, args.threads, None, args.fns)
        return
    from image_worlds import moto_s3, upload

    with moto_s3() as (server, fs, bucket):
        url = upload(fs, folder / "tars", f"s3://{bucket}/tars")
        server.clear()
        result = measure(folder, refs, args, url)
        passes = len([k for k in result["fetched"] if "/s3/" in k]) * args.repeats  # s3 passes in all
        sent = sum(b for _, b in server.gets(".tar")) / passes
        report(result, args.n, tar_bytes, args.threads, int(sent), args.fns)


if __name__ == "__main__":
    main()
