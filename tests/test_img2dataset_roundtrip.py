"""URL list -> a real img2dataset run over file:// URLs -> train reads the tars, joined on the key."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from caption_debias.export.urls import write_url_list
from caption_debias.image_source import ImageSource
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare
from caption_debias.train.data import FolderImages

COLORS = [(220, 30, 30), (30, 200, 40), (40, 60, 220), (230, 220, 30), (150, 40, 160), (240, 140, 20), (20, 200, 200)]
MISSING = "k7"  # its URL points at no file: img2dataset reports failed_to_download


@pytest.fixture(scope="module")
def downloaded(tmp_path_factory):
    root = tmp_path_factory.mktemp("i2d")
    src = root / "src"
    src.mkdir()
    rows = []
    for i, color in enumerate(COLORS):
        Image.new("RGB", (72, 48), color).save(src / f"{i}.png")
        rows.append(
            {
                "key": f"k{i}",
                "image": (src / f"{i}.png").as_uri(),
                "caption": f"This image shows colour {i}. The left half is plain. The right half is plain too.",
            }
        )
    rows.append({"key": MISSING, "image": (src / "gone.png").as_uri(), "caption": "A lost image. Nothing else."})
    table = root / "urls.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepared = root / "prepared"
    prepare([table], prepared, PrepareOptions(format="table", quiet=True))

    listing = write_url_list(
        prepared, root / "list.parquet", images=root / "images", image_size=64, processes=1, threads=2
    )
    argv = shlex.split(listing["command"])
    argv[0] = str(Path(sys.executable).with_name("img2dataset"))  # the venv's console script
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return prepared, root / "images", rows


def test_images_join_back_on_the_carried_key(downloaded):
    prepared, images, rows = downloaded
    assert sorted(p.name for p in images.glob("*.tar"))  # webdataset tars: NNNNN.tar with KEY.jpg + KEY.json
    source = FolderImages(images)
    for i, color in enumerate(COLORS):
        im = source.open(f"table/k{i}", rows[i]["image"])
        pixel = im.resize((1, 1)).getpixel((0, 0))
        assert all(abs(a - b) <= 12 for a, b in zip(pixel, color)), (i, pixel, color)  # JPEG-close
    with pytest.raises(OSError, match="failed_to_download"):
        source.open(f"table/{MISSING}", rows[-1]["image"])


def test_index_from_tar_json_members_when_metadata_parquet_is_gone(downloaded, tmp_path):
    _, images, _ = downloaded
    from_parquet = ImageSource(images).downloads()
    copy = tmp_path / "tars_only"
    copy.mkdir()
    for tar in images.glob("*.tar"):
        (copy / tar.name).write_bytes(tar.read_bytes())
    (copy / "00000_stats.json").write_text("{}")
    from_json = ImageSource(copy).downloads()
    assert from_json.found == from_parquet.found and len(from_json.found) == len(COLORS)


def test_train_reads_the_downloaded_tars(downloaded, tmp_path):
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.loop import train

    prepared, images, rows = downloaded
    cfg = TrainConfig(
        data=str(prepared),
        image_root=str(images),
        out=str(tmp_path / "run"),
        model="tiny",
        batch_size=len(rows),
        max_steps=1,
        lr=1e-3,
        warmup_steps=1,
        log_every=1,
        report_to="",
        quiet=True,
        precision="fp32",
        recipe="debias",
    )
    run = train(cfg)
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["skipped_images"] == 1  # only the failed download; every other row found its image by key
    assert last["loss"] == last["loss"]  # finite, not NaN


def test_tars_without_caption_key_say_so(tmp_path):
    import io
    import tarfile

    with tarfile.open(tmp_path / "00000.tar", "w") as tar:  # an img2dataset tar from some other URL list
        data = json.dumps({"key": "000000000", "status": "success"}).encode()
        info = tarfile.TarInfo("000000000.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "00000_stats.json").write_text("{}")
    with pytest.raises(OSError, match="carries no caption_key"):
        FolderImages(tmp_path).open("table/k0", "http://x/0.jpg")


def test_url_row_without_a_download_folder_says_what_to_do(tmp_path):
    with pytest.raises(OSError, match="download it first"):
        FolderImages(tmp_path).open("table/k0", "http://x/0.jpg")
