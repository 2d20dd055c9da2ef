"""Image facts: curate's path against a plain loop that fully decodes each image with PIL.

Writes N synthetic JPEGs with ShareGPT4V-like sizes (sides 1024-2048 px, quality 90), then
times on the same files:
  baseline: open + full decode (Image.load) + imagehash.phash + hashlib.sha256 of the bytes
  curate:   caption_debias.curate.images.image_facts (header size, JPEG draft decoding to >= 128 px
            greyscale, phash, sha256), one thread, and image_facts_batch on 4 threads (also with
            root-relative paths, as curate calls it: image_files.ImageRoot's path check)
  read:     the bytes alone, Path.read_bytes against ImageRoot.read (symlinks resolved, inside the
            root, a regular file, at most MAX_FILE_BYTES)
and prints files/s and CPU time per file (process time, every thread), each with its ratio to
the baseline, and the floor of any path that decodes every byte (draft decoding alone). Also checks the two
paths' perceptual hashes agree (Hamming).

    .venv/bin/python benchmarks/bench_curate_images.py --n 40 --dir /tmp/bench-images --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_images(folder: Path, n: int) -> list[Path]:
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"img{i:04d}.jpg"
        paths.append(path)
        if path.exists():
            continue
        r = random.Random(i)
        w, h = r.randint(1024, 2048), r.randint(1024, 2048)
        im = Image.new("RGB", (w, h), tuple(r.randrange(256) for _ in range(3)))
        d = ImageDraw.Draw(im)
        for _ in range(30):
            x, y, s = r.randrange(w), r.randrange(h), r.randrange(50, 600)
            d.ellipse((x, y, x + s, y + s * 0.7), fill=tuple(r.randrange(256) for _ in range(3)))
        noise = np.random.default_rng(i).integers(-10, 10, (h, w, 3))
        arr = (np.asarray(im.filter(ImageFilter.GaussianBlur(2))).astype(np.int16) + noise).clip(0, 255)
        Image.fromarray(arr.astype(np.uint8)).save(path, quality=90)
    return paths


def baseline(path: Path) -> tuple[int, int, str, str]:
    import imagehash
    from PIL import Image

    data = path.read_bytes()
    with Image.open(path) as im:
        im.load()
        return im.size[0], im.size[1], str(imagehash.phash(im)), hashlib.sha256(data).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/bench-images"))
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    from caption_debias.curate import images

    paths = make_images(args.dir, args.n)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    print(f"{len(paths)} JPEGs, {mb:.1f} MB, sides 1024-2048 px")

    def best(fn) -> tuple[float, float]:
        """(wall, CPU) seconds of the fastest of --repeats runs; CPU is this process's, all threads."""
        runs = []
        for _ in range(args.repeats):
            t, c = time.perf_counter(), time.process_time()
            fn()
            runs.append((time.perf_counter() - t, time.process_time() - c))
        return min(runs)

    def draft_decode_only(path: Path) -> None:
        # the floor of any path that decodes every byte: libjpeg's entropy decoding at 1/8 scale, no hashes
        from PIL import Image

        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            im.draft("L", (images.DRAFT_SIDE, images.DRAFT_SIDE))
            im.decodermaxblock = len(data)
            im.load()

    from caption_debias.image_files import ImageRoot
    from caption_debias.image_source import ImageSource

    guard = ImageRoot(args.dir)
    rels = [p.name for p in paths]
    n = len(paths)
    base = best(lambda: [baseline(p) for p in paths])
    rows = [
        ("baseline full decode + phash + sha256", base),
        ("curate image_facts, 1 thread", best(lambda: [images.image_facts(p) for p in paths])),
        ("curate image_facts_batch, 2 threads", best(lambda: images.image_facts_batch(paths, 2))),
        ("curate image_facts_batch, 4 threads", best(lambda: images.image_facts_batch(paths, 4))),
        ("floor: draft decode only (no hashes)", best(lambda: [draft_decode_only(p) for p in paths])),
        # curate's own call: paths relative to --image-root, each checked to stay inside it
        (
            "curate batch, 4 threads, root-relative",
            best(lambda: images.source_facts(ImageSource(str(args.dir), threads=4), rels)),
        ),
        ("read only: Path.read_bytes", best(lambda: [p.read_bytes() for p in paths])),
        ("read only: ImageRoot.read (checked)", best(lambda: [guard.read(r) for r in rels])),
    ]
    print(f"{'':40s} {'files/s':>9} {'vs base':>8} {'CPU ms/file':>12} {'vs base (CPU)':>14}")
    for name, (wall, cpu) in rows:
        print(f"{name:40s} {n / wall:9.1f} {base[0] / wall:7.2f}x {1000 * cpu / n:12.2f} {base[1] / cpu:13.2f}x")
    dist = []
    for p in paths:
        full = int(baseline(p)[2], 16)
        dist.append(images.hamming(full, images.image_facts(p).phash))
    print(f"phash draft vs full decode: Hamming max {max(dist)}, mean {sum(dist) / len(dist):.2f}")


if __name__ == "__main__":
    main()
