"""view's thumbnails and originals wherever the images live (folder_rows/images.py `Stored` over
image_source): members of img2dataset's tars, samples of its parquet output, URL rows' downloads,
and folders and roots on S3 (moto on loopback), in the app and in the --static snapshot."""

from __future__ import annotations

import base64
import io
import re

import pytest

pytest.importorskip("starlette")

from image_worlds import GONE, pixels

from caption_debias.folder_rows.images import NOT_DOWNLOADED
from caption_debias.image_source import ImageSource
from caption_debias.view.data import Query, ViewData


def client(data, tmp_path):
    from starlette.testclient import TestClient

    from caption_debias.folder_rows.thumbs import ThumbCache
    from caption_debias.view.app import create_app

    return TestClient(create_app(data, ThumbCache(tmp_path / "thumbs")), base_url="http://127.0.0.1")


def thumbs_by_key(c) -> dict[str, tuple[str, bytes]]:
    rows = c.get("/api/page", params={"limit": 100}).json()["rows"]
    out = {}
    for row in rows:
        res = c.get("/" + row["thumb"])
        assert res.status_code == 200, res.text
        out[row["key"]] = (res.headers["content-type"], res.headers.get("x-thumb", ""))
    return out


def test_rows_naming_tar_members_show_thumbnails_and_open_their_originals(wds, tmp_path):
    data = ViewData([str(wds.prepared)])  # the image root the prepared folder's manifest records
    c = client(data, tmp_path)
    shown = thumbs_by_key(c)
    assert len(shown) == len(wds.refs) and {t for t, _ in shown.values()} == {"image/jpeg"}, shown
    row = c.get("/api/page", params={"limit": 1}).json()["rows"][0]
    detail = c.get("/api/row", params={"f": 0, "s": 0, "r": 0}).json()
    assert detail["link"].startswith("image/0/") and "%23" in detail["link"]  # SHARD.tar#MEMBER, quoted
    original = c.get("/" + detail["link"])
    image = detail["image"] if "image" in detail else row["image"]
    assert original.status_code == 200 and original.content == ImageSource(wds.root).read(image)
    assert c.get("/image/0/00000.tar%23nope.jpg").status_code == 404


def test_parquet_samples_and_url_rows_through_the_downloads(wds, pq_out, urls, tmp_path):
    shown = thumbs_by_key(client(ViewData([str(pq_out.prepared)]), tmp_path / "pq"))
    assert len(shown) == len(pq_out.refs) and {t for t, _ in shown.values()} == {"image/jpeg"}
    # a URL-prepared folder with the downloaded tars as its image root: each row's download, by key
    shown = thumbs_by_key(client(ViewData([str(urls.prepared)], str(wds.root)), tmp_path / "urls"))
    gone = [k for k in shown if k.endswith(GONE)]
    assert gone and shown.pop(gone[0]) == ("image/svg+xml", f"placeholder: {NOT_DOWNLOADED}")
    assert {t for t, _ in shown.values()} == {"image/jpeg"} and len(shown) == len(wds.refs)


def _snapshot_thumbs(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'"thumb": ?"data:image/jpeg;base64,([A-Za-z0-9+/=]+)"', html)]


def test_static_snapshot_embeds_the_members_thumbnails(wds, tmp_path):
    from PIL import Image

    from caption_debias.view.options import ViewOptions
    from caption_debias.view.server import run_view

    out = tmp_path / "snap.html"
    run_view([str(wds.prepared)], ViewOptions(static=str(out), quiet=True), announce=lambda line: None)
    html = out.read_text("utf-8")
    jpegs = _snapshot_thumbs(html)
    assert len(set(jpegs)) == len(wds.refs) and "data:image/svg+xml" not in html  # every card a picture
    assert all(Image.open(io.BytesIO(j)).size[0] > 0 for j in jpegs)


def test_view_of_an_s3_folder_with_its_images_on_s3(wds, tmp_path):
    """`view s3://bucket/folder` (once a traceback: pyarrow was handed an S3Path) and its thumbnails
    from the tars on the same store; a static snapshot of it too."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from image_worlds import moto_s3, upload
    from PIL import Image

    from caption_debias.view.options import ViewOptions
    from caption_debias.view.server import run_view

    with moto_s3() as (server, fs, bucket):
        root = upload(fs, wds.root, f"s3://{bucket}/images")
        folder = upload(fs, wds.prepared, f"s3://{bucket}/prepared")
        assert ViewData([folder]).total_rows == len(wds.refs)  # no --image-root: the folder alone opens
        lines: list[str] = []
        out = tmp_path / "s3.html"
        run_view([folder], ViewOptions(image_root=root, static=str(out)), announce=lines.append)
        assert lines[0].startswith("prepared: prepared, ") and f"images under {root}" in lines[0], lines
        jpegs = _snapshot_thumbs(out.read_text("utf-8"))
        assert len(set(jpegs)) == len(wds.refs)
        data = ViewData([folder], root)
        assert data.page(Query(limit=100))["total"] == len(wds.refs)
        shown = thumbs_by_key(client(data, tmp_path / "s3"))
        assert {t for t, _ in shown.values()} == {"image/jpeg"} and len(shown) == len(wds.refs)
        local = thumbs_by_key(client(ViewData([str(wds.prepared)]), tmp_path / "local"))
        assert shown == local
        first = sorted(wds.refs.values())[0]
        png = Image.open(io.BytesIO(jpegs[0]))
        assert png.size[0] <= 256 and pixels(ImageSource(root).read(first), first)[0][0] > 0
