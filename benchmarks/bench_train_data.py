"""The data path, images per second per loader process, on the same samples three ways.

(a) today's folder loader on the original JPEGs (ShareGPT4V-like: 1024-2048 px sides):
    `train`'s TrainSamples + FolderImages + collate, DeBias texts from the stored ids;
(b) `train` on the packed tars (`caption-debias pack`, 256 px, img2dataset's resizer):
    the same TrainSamples + collate, rows from train/packed_source.py (wids random access);
(c) open_clip_train's own webdataset pipeline on the same tars (the anchor):
    open_clip_train.data.get_wds_dataset(is_train=True), its tokenizer on KEY.txt.

Every loader runs in this one process (DataLoader num_workers=0, one torch thread), so a
rate is what one loader process (one core) delivers; the rate per CPU second of the process
is reported too, as the per-core figure least disturbed by other work on a shared machine. All three apply the same transform,
the B/16 eval transform (resize 224, centre crop, normalise), which `train` uses; each
passes over its data --passes times (the folder loader once: it is the slow one), and
the order of the three runs alternates over --repeats.

    .venv/bin/python benchmarks/bench_train_data.py [--images 128 --passes 5 --repeats 3 --data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import _common  # this checkout on sys.path when it is not installed; the calibration data folder
import numpy as np

BATCH = 32


def write_originals(root: Path, n: int, seed: int) -> list[tuple[str, tuple[int, int], int]]:
    """n JPEGs, each side uniform in 1024..2048 px (ShareGPT4V's range), quality 90, shapes on a gradient plus noise."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        w, h = (int(x) for x in rng.integers(1024, 2049, size=2))
        x = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        y = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
        base = rng.uniform(40, 215, size=3).astype(np.float32)
        pixels = base + 60 * x * rng.uniform(-1, 1, 3) + 60 * y * rng.uniform(-1, 1, 3)
        pixels = pixels + rng.normal(0, 6, size=(h, w, 3)).astype(np.float32)
        im = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(im)
        for _ in range(12):
            x0, y0 = int(rng.integers(0, w - 64)), int(rng.integers(0, h - 64))
            x1, y1 = x0 + int(rng.integers(32, w // 3)), y0 + int(rng.integers(32, h // 3))
            colour = tuple(int(c) for c in rng.integers(0, 256, size=3))
            (draw.ellipse if rng.random() < 0.5 else draw.rectangle)((x0, y0, x1, y1), fill=colour)
        name = f"img{i:05d}.jpg"
        im.save(root / name, quality=90)
        out.append((name, (w, h), (root / name).stat().st_size))
    return out


def captions(n: int, data: Path) -> list[str]:
    """Real long captions (the calibration folder's, see docs/benchmarks.md) when there, else synthetic ones."""
    try:
        texts = _common.long_captions(data)
    except OSError:
        texts = []
    if not texts:
        texts = [
            f"The image shows scene {i}. A red object sits left of centre. The background is a plain gradient. "
            "Several shapes overlap near the top. The light comes from the right."
            for i in range(n)
        ]
    return [texts[i % len(texts)] for i in range(n)]


def build(work: Path, n: int, data: Path) -> tuple[Path, Path, Path, list]:
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = work / "images"
    originals = write_originals(images, n, seed=0)
    items = [
        {
            "id": f"b{i}",
            "image": name,
            "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": c}],
        }
        for i, ((name, _, _), c) in enumerate(zip(originals, captions(n, data)))
    ]
    (work / "sharegpt4v.json").write_text(json.dumps(items), "utf-8")
    prepared, packed = work / "prepared", work / "packed"
    prepare([work / "sharegpt4v.json"], prepared, PrepareOptions(format="sharegpt4v", quiet=True, overwrite=True))
    t = time.perf_counter()
    pack(
        prepared,
        packed,
        PackOptions(image_root=str(images), samples_per_shard=max(1, n // 4), quiet=True, overwrite=True),
    )
    pack_s = time.perf_counter() - t
    return prepared, images, packed, [originals, pack_s]


def b16():
    import open_clip

    preprocess = open_clip.image_transform(224, is_train=False)  # ViT-B-16's eval transform (OpenAI mean/std)
    return preprocess, open_clip.get_tokenizer("ViT-B-16")


def _train_loader(rows, images, preprocess, passes: int):
    """`train`'s own dataset, collate and DataLoader (main process), over every row `passes` times."""
    from torch.utils.data import DataLoader

    from caption_debias.augment import DebiasOptions
    from caption_debias.train.data import TrainSamples, collate

    samples = TrainSamples(rows, images, preprocess, "debias", 248, 0, DebiasOptions())
    order = [(p, r) for p in range(passes) for r in range(len(rows))]
    batches = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
    return DataLoader(samples, batch_sampler=batches, num_workers=0, collate_fn=collate)


def rate_folder(prepared: Path, images: Path, preprocess, passes: int) -> tuple[float, int]:
    from open_clip.tokenizer import SimpleTokenizer

    from caption_debias.train.data import FolderImages, load_rows

    rows = load_rows(prepared, SimpleTokenizer())
    return _time(_train_loader(rows, FolderImages(images), preprocess, passes))


def rate_packed(packed: Path, preprocess, passes: int) -> tuple[float, int]:
    from open_clip.tokenizer import SimpleTokenizer

    from caption_debias.train.packed_source import load_packed

    rows, images = load_packed(str(packed), SimpleTokenizer())
    return _time(_train_loader(rows, images, preprocess, passes))


def rate_open_clip_train(packed: Path, preprocess, tokenizer, passes: int) -> tuple[float, int]:
    from open_clip_train.data import get_wds_dataset
    from train_fixtures import wds_args  # the tests' builder: one set of open_clip_train's data arguments

    manifest = json.loads((packed / "manifest.json").read_text())
    args = wds_args(str(packed / manifest["train_data"]), batch_size=BATCH)
    t0, c0, seen = time.perf_counter(), time.process_time(), 0
    for epoch in range(passes):
        for image, _text in get_wds_dataset(args, preprocess, True, epoch=epoch, tokenizer=tokenizer).dataloader:
            seen += len(image)
    return seen / (time.perf_counter() - t0), seen / (time.process_time() - c0), seen


def _time(loader) -> tuple[float, float, int]:
    """(images per wall second, images per CPU second of this process, images)."""
    t0, c0, seen = time.perf_counter(), time.process_time(), 0
    for batch in loader:
        assert not batch["errors"], batch["errors"][:1]
        seen += len(batch["image"])
    return seen / (time.perf_counter() - t0), seen / (time.process_time() - c0), seen


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--passes", type=int, default=5, help="passes over the tars for (b) and (c)")
    ap.add_argument("--repeats", type=int, default=3)
    _common.add_data_option(ap)
    ap.add_argument("--work", type=Path, default=None, help="keep the generated data here (default: a temp folder)")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args()
    if args.images < 2 * BATCH:
        ap.error(f"--images must be at least {2 * BATCH}: open_clip_train drops partial batches and repeats its epoch")
    import torch

    torch.set_num_threads(1)  # one loader process = one core
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        t = time.perf_counter()
        prepared, images, packed, (originals, pack_s) = build(work, args.images, args.data)
        setup_s = time.perf_counter() - t
        preprocess, tokenizer = b16()
        runs = {
            "a_folder_originals": lambda: rate_folder(prepared, images, preprocess, 1),
            "b_train_packed": lambda: rate_packed(packed, preprocess, args.passes),
            "c_open_clip_train_packed": lambda: rate_open_clip_train(packed, preprocess, tokenizer, args.passes),
        }
        rates: dict[str, list[float]] = {k: [] for k in runs}
        cpu_rates: dict[str, list[float]] = {k: [] for k in runs}
        names = list(runs)
        for r in range(args.repeats):
            for name in names[r % 3 :] + names[: r % 3]:  # rotate the order: no run is always first
                rate, cpu_rate, seen = runs[name]()
                rates[name].append(rate)
                cpu_rates[name].append(cpu_rate)
                print(
                    f"repeat {r} {name}: {rate:.1f} images/s, {cpu_rate:.1f} per CPU second ({seen} images)", flush=True
                )
        sizes = np.array([s for _, _, s in originals]) / 1024
        packed_bytes = sum(p.stat().st_size for p in packed.glob("*.tar")) / len(originals) / 1024
        best = {k: max(v) for k, v in rates.items()}
        cpu = {k: statistics.median(v) for k, v in cpu_rates.items()}
        result = {
            "images": len(originals),
            "original_sides_px": [min(min(wh) for _, wh, _ in originals), max(max(wh) for _, wh, _ in originals)],
            "original_kib_median": round(float(np.median(sizes)), 1),
            "packed_kib_per_sample": round(packed_bytes, 1),
            "pack_s": round(pack_s, 1),
            "pack_images_per_s": round(len(originals) / pack_s, 2),
            "setup_s": round(setup_s, 1),
            "images_per_s": {k: [round(x, 1) for x in v] for k, v in rates.items()},
            "best_images_per_s": {k: round(v, 1) for k, v in best.items()},
            "b_over_c": round(best["b_train_packed"] / best["c_open_clip_train_packed"], 2),
            "b_over_a": round(best["b_train_packed"] / best["a_folder_originals"], 2),
            # Images per CPU second of the loader process: what one core delivers, much less
            # sensitive than wall time to other processes sharing the machine.
            "images_per_cpu_s": {k: [round(x, 1) for x in v] for k, v in cpu_rates.items()},
            "median_images_per_cpu_s": {k: round(v, 1) for k, v in cpu.items()},
            "cpu_b_over_c": round(cpu["b_train_packed"] / cpu["c_open_clip_train_packed"], 2),
            "cpu_b_over_a": round(cpu["b_train_packed"] / cpu["a_folder_originals"], 2),
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
        }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
