"""The image source with its root on S3 (moto's server on 127.0.0.1, counting every request): the same
results as the local root, each tar fetched once, sequentially, and no more bytes than it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from image_worlds import (
    by_key,
    hostile_root,
    moto_s3,
    pixels,
    plain,
    raw,
    upload,
)

from caption_debias.errors import UserError
from caption_debias.image_files import MISSING
from caption_debias.image_source import ImageSource, resolve_root


@pytest.fixture(scope="module")
def s3(wds, pq_out, loose, tmp_path_factory):
    """The worlds on one moto server: s3://BUCKET/{wds,parquet,loose,hostile}."""
    hostile = hostile_root(tmp_path_factory.mktemp("hostile-s3"), with_fifo=False)
    with moto_s3() as (server, fs, bucket):
        for name, folder in (("wds", wds.root), ("parquet", pq_out.root), ("loose", loose.root)):
            upload(fs, folder, f"s3://{bucket}/{name}")
        upload(fs, hostile.root, f"s3://{bucket}/hostile")
        yield server, bucket, hostile


def test_tars_on_s3_read_as_the_local_ones_each_fetched_once(s3, wds):
    server, bucket, _ = s3
    server.clear()
    source = ImageSource(f"s3://{bucket}/wds")
    assert by_key(source, wds.refs, pixels) == by_key(ImageSource(wds.root), wds.refs, pixels)
    tars = sorted(p.name for p in wds.root.glob("*.tar"))
    gets = server.gets(".tar")
    assert sorted(Path(p).name for p, _ in gets) == tars  # one GET per tar: fetched once, front to back
    for path, sent in gets:
        name = Path(path).name
        assert sent == source.stats.fetched[name] <= (wds.root / name).stat().st_size
    assert dict(source.stats.opened) == dict.fromkeys(tars, 1)


def test_parquet_samples_and_url_rows_on_s3(s3, pq_out, wds):
    server, bucket, _ = s3
    local = by_key(ImageSource(wds.root), wds.refs)
    assert by_key(ImageSource(f"s3://{bucket}/parquet"), pq_out.refs) == local
    urls = wds.urls
    for name in ("wds", "parquet"):
        got = dict(zip(urls.keys, ImageSource(f"s3://{bucket}/{name}").map(urls.urls, raw, keys=urls.keys)))
        assert {k: v for k, v in got.items() if k in local} == local
        assert got["table/gone"].reason == MISSING and "failed_to_download" in got["table/gone"].detail


def test_loose_files_on_s3_give_the_tars_pixels(s3, loose, wds):
    _, bucket, _ = s3
    assert by_key(ImageSource(f"s3://{bucket}/loose"), loose.refs, pixels) == by_key(
        ImageSource(wds.root), wds.refs, pixels
    )


def test_hostile_tars_on_s3_give_the_local_reasons(s3):
    _, bucket, hostile = s3
    rows = [(image, expected) for image, expected in hostile.rows if not image.startswith(("dir.tar", "fifo.tar"))]
    images = [image for image, _ in rows]
    remote = ImageSource(f"s3://{bucket}/hostile").map(images, raw)
    local = ImageSource(hostile.root).map(images, raw)
    assert [plain(r) for r in remote] == [plain(r) for r in local]


def test_an_s3_root_that_does_not_exist_is_named_as_typed(s3):
    _, bucket, _ = s3
    with pytest.raises(UserError, match=rf"^--image-root s3://{bucket}/nowhere: no such folder$"):
        resolve_root(f"s3://{bucket}/nowhere")
    assert resolve_root(f"s3://{bucket}/wds/").resolved == f"s3://{bucket}/wds"


def test_img2dataset_output_on_s3_prepares_to_the_references_the_source_reads(s3, wds, tmp_path):
    from caption_debias.dataset import PreparedDataset
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    server, bucket, _ = s3
    server.clear()
    prepare([f"s3://{bucket}/wds"], tmp_path / "prepared", PrepareOptions(format="img2dataset", quiet=True))
    images = PreparedDataset.open(tmp_path / "prepared").read(["image"]).column("image").to_pylist()
    assert sorted(images) == sorted(wds.refs.values())
    shards = len(list(wds.root.glob("*.tar")))
    asked = [(m, p) for m, p, _, _ in server.requests if ".tar" in p or m == "HEAD"]
    assert len(asked) <= 3 * shards < len(images) * 2, asked
