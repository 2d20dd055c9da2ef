"""One image at a time (image_source/lookup.py: view's thumbnails, train's rows, eval's pairs): the
same bytes and problems as ImageSource.read in every world, each tar indexed once per process,
on a local root and on S3 (moto on loopback)."""

from __future__ import annotations

import pickle
import random

import pytest
from image_worlds import every_world

from caption_debias.image_files import ImageProblem
from caption_debias.image_source import ImageSource
from caption_debias.image_source.lookup import ImageLookup


def results(read, images, keys=None) -> list:
    out = []
    for i, image in enumerate(images):
        try:
            out.append(read(image, None if keys is None else keys[i]))
        except ImageProblem as exc:
            out.append((exc.reason, exc.detail))
    return out


def test_lookup_reads_what_the_row_by_row_reference_reads_in_every_world(wds, pq_out, loose, packed, urls, tmp_path):
    worlds = every_world(wds, pq_out, loose, packed, urls, tmp_path)
    for root, images, keys in worlds:
        order = list(range(len(images)))
        random.Random(3).shuffle(order)  # rows drawn in any order, as train draws them
        images, keys = [images[i] for i in order], None if keys is None else [keys[i] for i in order]
        source = ImageSource(root)
        assert results(ImageLookup(ImageSource(root)).read, images, keys) == results(source.read, images, keys), root


def test_each_tar_is_indexed_once_however_many_rows_read_it(wds):
    lookup = ImageLookup(ImageSource(wds.root))
    images = list(wds.refs.values()) * 3
    for image in images:
        lookup.read(image)
    tars = sorted({image.partition("#")[0] for image in images})
    assert dict(lookup.source.stats.opened) == dict.fromkeys(tars, 1)


def test_a_lookup_sent_to_another_process_opens_its_own_tars(wds):
    lookup = ImageLookup(ImageSource(wds.root))
    image = next(iter(wds.refs.values()))
    data = lookup.read(image)
    copy = pickle.loads(pickle.dumps(lookup))
    assert copy.read(image) == data and copy._tars and copy._tars is not lookup._tars


def test_an_image_version_changes_when_the_tar_is_rewritten(wds, tmp_path):
    import shutil

    root = tmp_path / "root"
    shutil.copytree(wds.root, root)
    image = next(iter(wds.refs.values()))
    lookup = ImageLookup(ImageSource(root))
    before = lookup.image_version(image)
    assert lookup.image_version(image) == before
    tar = root / image.partition("#")[0]
    tar.write_bytes(tar.read_bytes() + bytes(1024))
    assert lookup.image_version(image) != before
    with pytest.raises(ImageProblem, match="no file 99999.tar"):
        lookup.image_version("99999.tar#x.jpg")


def test_lookup_on_s3_reads_each_member_by_its_range(wds):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from image_worlds import moto_s3, upload

    with moto_s3() as (server, fs, bucket):
        url = upload(fs, wds.root, f"s3://{bucket}/wds")
        lookup = ImageLookup(ImageSource(url), member_buffer=4096)
        images = list(wds.refs.values())
        local = ImageLookup(ImageSource(wds.root))
        server.clear()
        assert [lookup.read(i) for i in images] == [local.read(i) for i in images]
        assert lookup.image_version(images[0]) == lookup.image_version(images[0])
        for name in sorted({i.partition("#")[0] for i in images}):
            gets = server.gets(name)
            size = (wds.root / name).stat().st_size
            members = sum(1 for i in images if i.startswith(name))
            # one pass over the headers, then each member read by its own range (4 KiB), never the tar again
            assert gets[0][1] <= size and 1 < len(gets) <= 2 + members, (name, gets)  # + the first header, once
            assert all(n < size / 2 for _, n in gets[1:]), (name, gets)
