"""train's images through image_source: rows naming members of img2dataset's tars give the same
samples as the loose files of the same pictures, with the root here or on S3 (moto on loopback),
each tar indexed once per process however many rows read it."""

from __future__ import annotations

import pickle

import pytest
from image_worlds import built, i2d_world, url_world


@pytest.fixture(scope="module")
def wds(tmp_path_factory):
    urls = built(tmp_path_factory, "urls", url_world)
    return built(tmp_path_factory, "wds", lambda base: i2d_world(base, "webdataset", urls))


def _pixels(images, refs: dict[str, str]) -> dict[str, bytes]:
    return {key: images.open(key, image).tobytes() for key, image in sorted(refs.items())}


def test_tar_rows_give_the_loose_files_pixels_each_tar_indexed_once(wds, loose):
    from caption_debias.train.data import FolderImages

    on_files = _pixels(FolderImages(loose.root), loose.refs)
    images = FolderImages(wds.root)
    assert _pixels(images, wds.refs) == on_files
    assert _pixels(images, wds.refs) == on_files  # read again: from the kept index
    tars = sorted({image.partition("#")[0] for image in wds.refs.values()})
    assert dict(images.lookup.source.stats.opened) == dict.fromkeys(tars, 1)
    copy = pickle.loads(pickle.dumps(images))  # a DataLoader worker: its own tars
    assert _pixels(copy, wds.refs) == on_files and dict(copy.lookup.source.stats.opened) == dict.fromkeys(tars, 1)


def test_train_reads_a_root_on_s3(wds, loose, tmp_path):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from image_worlds import moto_s3, upload

    from caption_debias.train.config import TrainConfig
    from caption_debias.train.data import FolderImages

    on_files = _pixels(FolderImages(loose.root), loose.refs)
    with moto_s3() as (server, fs, bucket):
        root = upload(fs, wds.root, f"s3://{bucket}/images")
        TrainConfig(data=str(wds.prepared), image_root=root, out=str(tmp_path / "run")).check()  # a URL root is taken
        images = FolderImages(root)
        server.clear()
        assert _pixels(images, wds.refs) == on_files
        tars = sorted(wds.root.glob("*.tar"))
        for tar in tars:  # the header pass and the member reader (these tars fit its buffer): never a GET per row
            assert 1 <= len(server.gets(tar.name)) <= 2, (tar.name, server.gets(tar.name))
        assert len(server.gets(".tar")) <= 2 * len(tars) < len(wds.refs)
