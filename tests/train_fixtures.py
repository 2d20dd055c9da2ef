"""Small prepared folder + images for the train tests (written by `prepare` on a JSON-lines table)."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "white", "black"]
SHAPES = ["circle", "square", "triangle", "star"]


def make_prepared(root: Path, n: int = 24, groups: int = 0, missing: tuple[int, ...] = ()) -> tuple[Path, Path]:
    """Returns (prepared folder, image root). Captions: a summary sentence + 2..4 detail sentences."""
    from pictures import picture, tint, write

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        color, shape = COLORS[i % len(COLORS)], SHAPES[(i // len(COLORS)) % len(SHAPES)]
        name = f"img{i:04d}.png"
        if i not in missing:
            disc = ("ellipse", (8 + i % 16, 8, 40 + i % 16, 40), (255 - i * 7 % 256, 20, 90))
            write(picture((64, 64), tint(i), disc), images / name)
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


MISSING = 5  # the image train_set leaves out of `images` (present in `images_good`)


def train_set(root: Path) -> tuple[Path, Path, Path]:
    """(prepared folder, images with img0005.png missing, the same images complete): 12 rows in 3 groups."""
    data, images = make_prepared(root, n=12, groups=3, missing=(MISSING,))
    good = root / "images_good"
    shutil.copytree(images, good)
    shutil.copy(good / "img0000.png", good / f"img{MISSING:04d}.png")
    return data, images, good


def tiny_config(data: Path, images: Path | None, out: Path | None, **options: Any):
    """A few fp32 CPU steps of the shipped `tiny` model, a line and a checkpoint every other step: the one
    TrainConfig the tests start from (images None: a packed folder's own; out None: the config's default)."""
    from caption_debias.train.config import TrainConfig

    base: dict[str, Any] = dict(
        data=str(data),
        image_root=None if images is None else str(images),
        out=None if out is None else str(out),
        model="tiny",
        batch_size=4,
        lr=1e-3,
        warmup_steps=1,
        log_every=1,
        checkpoint_every=2,
        keep_checkpoints=0,
        report_to="",
        quiet=True,
        precision="fp32",
    )
    return TrainConfig(**{**base, **options})


def wds_args(train_data: Any, val_data: Any = None, train_num_samples: int | None = None, batch_size: int = 5):
    """open_clip_train's data arguments as its own `get_wds_dataset` reads them: one process, no loader workers."""
    return argparse.Namespace(
        train_data=train_data,
        val_data=val_data,
        train_num_samples=train_num_samples,
        val_num_samples=None,
        dataset_resampled=False,
        train_data_upsampling_factors=None,
        seed=0,
        workers=0,
        world_size=1,
        batch_size=batch_size,
    )


def crash_at_step(monkeypatch, loop: Any, step: int, train_once: Any) -> None:
    """Run `train_once()` stopped by a KeyboardInterrupt as step `step` asks for its learning rate (as a killed
    run stops between steps); the schedule is restored afterwards."""
    import pytest

    real_lr_at = loop.lr_at

    def crash(at: int, *args: Any) -> Any:
        if at == step:
            raise KeyboardInterrupt
        return real_lr_at(at, *args)

    monkeypatch.setattr(loop, "lr_at", crash)
    with pytest.raises(KeyboardInterrupt):
        train_once()
    monkeypatch.setattr(loop, "lr_at", real_lr_at)


def checkpoint(run: Path, step: int) -> dict[str, Any]:
    """A run's checkpoint of one step, read as train reads it (weights only)."""
    import torch

    return torch.load(run / "checkpoints" / f"step_{step:08d}.pt", weights_only=True)


def metric_lines(run: Path) -> list[dict]:
    """A run's metrics.jsonl lines without the one wall-clock field (images_per_s), so two runs compare."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        d = json.loads(line)
        d.pop("images_per_s")
        out.append(d)
    return out
