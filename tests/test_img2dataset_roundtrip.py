"""URL list -> a real img2dataset run over file:// URLs (the shared `urls` and `wds` worlds) -> train reads the
tars, joined on the key."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from train_fixtures import tiny_config

from caption_debias.image_source import ImageSource
from caption_debias.train.data import FolderImages


def mean_colour(im: Image.Image) -> tuple:
    return im.convert("RGB").resize((1, 1), Image.Resampling.BOX).getpixel((0, 0))


def test_images_join_back_on_the_carried_key(urls, wds):
    """The shared URL world (tests/image_worlds.py) through its real img2dataset run: every URL row opens
    the picture of its own key (the closest in colour of all the sources), the failed download says so."""
    assert sorted(p.name for p in wds.root.glob("*.tar"))  # webdataset tars: NNNNN.tar with KEY.jpg + KEY.json
    source = FolderImages(wds.root)
    wanted = {name: mean_colour(Image.open(path)) for name, path in urls.sources.items()}
    (gone,) = wds.failed
    for key, url in zip(urls.keys, urls.urls):
        if key == gone:
            with pytest.raises(OSError, match="failed_to_download"):
                source.open(key, url)
            continue
        got = mean_colour(source.open(key, url))
        name = key.split("/", 1)[1]
        closest = min(wanted, key=lambda other: sum((a - b) ** 2 for a, b in zip(wanted[other], got)))
        assert closest == name and all(abs(a - b) <= 12 for a, b in zip(got, wanted[name])), (key, got, wanted[name])


def test_index_from_tar_json_members_when_metadata_parquet_is_gone(wds, tmp_path):
    from_parquet = ImageSource(wds.root).downloads()
    copy = tmp_path / "tars_only"
    copy.mkdir()
    for tar in wds.root.glob("*.tar"):
        (copy / tar.name).write_bytes(tar.read_bytes())
    (copy / "00000_stats.json").write_text("{}")
    from_json = ImageSource(copy).downloads()
    assert from_json.found == from_parquet.found and len(from_json.found) == len(wds.refs)


def test_train_reads_the_downloaded_tars(urls, wds, tmp_path):
    from caption_debias.train.loop import train

    cfg = tiny_config(
        urls.prepared, wds.root, tmp_path / "run", batch_size=len(urls.keys), max_steps=1, recipe="debias"
    )
    run = train(cfg)
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["skipped_images"] == len(wds.failed) == 1  # every other row found its image by key
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
