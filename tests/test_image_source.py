"""The image source: rows' images in img2dataset tars and parquet files, pack's tars, loose files and
URL rows, read in one pass per tar, with every fault one row's reason (image_source/)."""

from __future__ import annotations

import io
import json
import math
import os
import random
import shutil
import tarfile
import tracemalloc

import pytest
from image_worlds import (
    GONE,
    N_PICTURES,
    by_key,
    every_world,
    hostile_root,
    pixels,
    plain,
    raw,
)
from pictures import not_a_picture

from caption_debias.errors import UserError
from caption_debias.image_files import MISSING, UNREADABLE, ImageProblem
from caption_debias.image_source import (
    ImageCounts,
    ImageSource,
    check_max_missing,
    check_missing,
    downloads,
    no_root_line,
    resolve_root,
)
from caption_debias.image_source.roots import LocalFiles


def reference(source: ImageSource, images, keys=None) -> list:
    out = []
    for i, image in enumerate(images):
        try:
            out.append(source.read(image, None if keys is None else keys[i]))
        except ImageProblem as exc:
            out.append(exc)
    return out


def same(a, b) -> bool:
    """Equal results: the same bytes, or problems of the same reason and detail."""
    if isinstance(a, ImageProblem) or isinstance(b, ImageProblem):
        return (
            isinstance(a, ImageProblem) and isinstance(b, ImageProblem) and (a.reason, a.detail) == (b.reason, b.detail)
        )
    return a == b


# -- the worlds read the same images -----------------------------------------------------------


def test_img2dataset_tars_decode_to_the_loose_files_pixels(wds, loose):
    assert len({ref.partition("#")[0] for ref in wds.refs.values()}) >= 3  # several tars
    assert wds.failed == [f"table/{GONE}"] and len(wds.refs) == N_PICTURES
    from_tars = by_key(ImageSource(wds.root), wds.refs, pixels)
    from_files = by_key(ImageSource(loose.root), loose.refs, pixels)
    assert from_tars == from_files
    assert not any(isinstance(v, ImageProblem) for v in from_tars.values())


def test_parquet_output_rows_read_the_samples_the_tars_hold(wds, pq_out):
    assert all(".parquet#" in ref for ref in pq_out.refs.values())  # as the img2dataset reader records them
    assert sorted(pq_out.refs) == sorted(wds.refs)
    assert by_key(ImageSource(pq_out.root), pq_out.refs) == by_key(ImageSource(wds.root), wds.refs)


@pytest.mark.parametrize("world", ["wds", "pq_out"])
def test_url_rows_are_found_by_their_carried_key(world, request, wds):
    world = request.getfixturevalue(world)
    urls = world.urls
    source = ImageSource(world.root)
    got = dict(zip(urls.keys, source.map(urls.urls, raw, keys=urls.keys)))
    expected = by_key(ImageSource(wds.root), wds.refs)
    assert {k: v for k, v in got.items() if k in expected} == expected
    gone = got[f"table/{GONE}"]
    assert gone.reason == MISSING and "failed_to_download" in gone.detail
    assert source.map(urls.urls[:1], raw)[0].reason == MISSING  # no key given: nothing to join on


def test_url_rows_under_a_root_without_img2dataset_output_say_so(urls, loose):
    problem = ImageSource(loose.root).map(urls.urls[:1], raw, keys=urls.keys[:1])[0]
    assert problem.reason == MISSING and "holds no img2dataset output; download it first" in problem.detail


def test_download_index_from_tar_json_members_equals_the_metadata_one(wds, tmp_path):
    for tar in wds.root.glob("*.tar"):
        shutil.copy(tar, tmp_path / tar.name)
    from_json = downloads.build(LocalFiles(resolve_root(tmp_path)))
    from_meta = downloads.build(LocalFiles(resolve_root(wds.root)))
    assert from_json.found == from_meta.found and len(from_json.found) == N_PICTURES


def test_output_without_caption_key_says_to_download_from_the_urls_list(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"key": ["000000000"], "status": ["success"]}), tmp_path / "00000.parquet")
    problem = ImageSource(tmp_path).map(["https://x/0.jpg"], raw, keys=["k0"])[0]
    assert problem.reason == MISSING and "carries no caption_key" in problem.detail


def test_pack_tars_read_as_webdatasets_own_reader_reads_them(packed):
    import webdataset as wds_lib

    tars = sorted(str(p) for p in packed.root.glob("*.tar"))
    assert len(tars) >= 2
    samples = {s["__key__"]: s["jpg"] for s in wds_lib.WebDataset(tars, shardshuffle=False)}
    got = by_key(ImageSource(packed.root), packed.refs)
    assert {k: got[k] for k in packed.refs} == {k: samples[packed.refs[k].partition("#")[2][:-4]] for k in packed.refs}


# -- one pass per tar, any order, any thread count -----------------------------------------------


def test_each_tar_is_opened_once_per_batch_whatever_the_row_order(wds):
    images = list(wds.refs.values())
    random.Random(0).shuffle(images)
    source = ImageSource(wds.root)
    got = source.map(images, raw)
    assert got == reference(ImageSource(wds.root), images)
    tars = sorted(p.name for p in wds.root.glob("*.tar"))
    assert dict(source.stats.opened) == dict.fromkeys(tars, 1)
    for name in tars:
        assert 0 < source.stats.fetched[name] <= (wds.root / name).stat().st_size


def test_members_come_back_in_tar_order_with_their_row_index(wds):
    tar = sorted(wds.root.glob("*.tar"))[0]
    with tarfile.open(tar) as t:
        order = [m.name for m in t.getmembers() if m.name.endswith(".jpg")]
    images = [f"{tar.name}#{m}" for m in reversed(order)]
    got = list(ImageSource(wds.root).stream(images, lambda data, name: name))
    assert [name for _, name in got] == [f"{tar.name}#{m}" for m in order]
    assert all(images[i] == name for i, name in got)


def test_in_row_order_gives_each_result_in_its_rows_turn(wds, urls):
    tar = sorted(wds.root.glob("*.tar"))[0]
    with tarfile.open(tar) as t:
        order = [m.name for m in t.getmembers() if m.name.endswith(".jpg")]
    images = [f"{tar.name}#{m}" for m in reversed(order)] + [None]
    source = ImageSource(wds.root)
    got = list(source.in_row_order(images, lambda data, name: name))
    assert got == [(i, image) for i, image in enumerate(images) if image is not None]
    in_order = ImageSource(wds.root).in_row_order(list(reversed(images[:-1])), raw)
    assert [i for i, _ in in_order] == list(range(len(order)))
    url_rows = list(ImageSource(wds.root).in_row_order(urls.urls, raw, keys=urls.keys))
    assert [i for i, _ in url_rows] == list(range(len(urls.urls)))


def test_rows_naming_one_image_share_one_read_and_one_call(wds, loose):
    image = next(iter(wds.refs.values()))
    calls = []
    got = ImageSource(wds.root).map([image, None, image], lambda data, name: calls.append(name) or len(data))
    assert got[0] == got[2] > 0 and got[1] is None and len(calls) == 1


def test_results_do_not_depend_on_the_thread_count(wds, loose, urls):
    for root, images, keys in (
        (wds.root, list(wds.refs.values()), None),
        (loose.root, list(loose.refs.values()), None),
        (wds.root, urls.urls, urls.keys),
    ):
        one = list(ImageSource(root).stream(images, pixels, keys=keys, threads=1))
        four = list(ImageSource(root).stream(images, pixels, keys=keys, threads=4))
        assert [(i, plain(r)) for i, r in one] == [(i, plain(r)) for i, r in four]


def test_a_stream_left_early_or_failing_stops_its_reader_thread(wds):
    import threading

    images = list(wds.refs.values())
    stream = ImageSource(wds.root).stream(images, raw, threads=4)
    next(stream)
    stream.close()

    def bug(data: bytes, name: str):
        raise RuntimeError("a bug in the caller's function")

    with pytest.raises(RuntimeError, match="a bug in the caller's function"):  # not a row's reason
        ImageSource(wds.root).map(images, bug, threads=4)
    assert not [t for t in threading.enumerate() if t.name.startswith("images")]


def test_batched_stream_equals_the_row_by_row_reference_in_every_world(wds, pq_out, loose, packed, urls, tmp_path):
    worlds = every_world(wds, pq_out, loose, packed, urls, tmp_path)
    for root, images, keys in worlds:
        batched = ImageSource(root).map(images, raw, keys=keys)
        expected = reference(ImageSource(root), images, keys)
        assert all(same(a, b) for a, b in zip(batched, expected)), root


def test_a_streamed_tar_holds_one_image_at_a_time_not_the_tar(tmp_path):
    rng = random.Random(5)
    with tarfile.open(tmp_path / "big.tar", "w") as tar:
        for i in range(40):
            data = rng.randbytes(1 << 20)
            info = tarfile.TarInfo(f"{i:03d}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    images = [f"big.tar#{i:03d}.jpg" for i in range(40)]
    tracemalloc.start()
    try:
        sizes = [n for _, n in ImageSource(tmp_path).stream(images, lambda data, name: len(data))]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sizes == [1 << 20] * 40
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB for a 40 MiB tar"  # the read buffer and an image or two


# -- hostile tars: each one row's reason, never a traceback --------------------------------------


def test_hostile_tars_and_parquet_files_give_each_row_its_reason(tmp_path):
    hostile = hostile_root(tmp_path)
    images = [image for image, _ in hostile.rows]
    got = ImageSource(hostile.root).map(images, raw)
    for (image, expected), result in zip(hostile.rows, got):
        if isinstance(expected, bytes):
            assert result == expected, (image, result)
        else:
            reason, piece = expected
            assert isinstance(result, ImageProblem), (image, result)
            assert (result.reason, piece in result.detail) == (reason, True), (image, result.detail)
            assert "\n" not in result.detail


def test_a_decode_failure_is_the_rows_reason(wds, tmp_path):
    not_a_picture(tmp_path / "not.jpg", "not an image")
    got = ImageSource(tmp_path).map(["not.jpg"], pixels)[0]
    assert got.reason == UNREADABLE and "not an image Pillow can identify" in got.detail


# -- roots ---------------------------------------------------------------------------------------


def test_a_relative_root_typed_in_one_folder_works_from_another(loose, tmp_path, monkeypatch):
    monkeypatch.chdir(loose.root.parent)
    root = resolve_root(loose.root.name)
    assert root.resolved == os.path.realpath(loose.root) and root.typed == loose.root.name
    monkeypatch.chdir(tmp_path)
    image = next(iter(loose.refs.values()))
    assert ImageSource(root).read(image) == (loose.root / image).read_bytes()


def test_a_symlinked_root_is_followed_once_and_a_rows_symlink_out_still_refused(loose, tmp_path):
    (tmp_path / "link").symlink_to(loose.root)
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"x")
    escape = loose.root / "escape.jpg"
    escape.symlink_to(secret)
    try:
        root = resolve_root(tmp_path / "link")
        assert root.resolved == os.path.realpath(loose.root)
        image = next(iter(loose.refs.values()))
        got = ImageSource(root).map([image, "escape.jpg"], raw)
        assert got[0] == (loose.root / image).read_bytes()
        assert got[1].reason == UNREADABLE and "outside the image root" in got[1].detail
    finally:
        escape.unlink()


def test_a_root_that_does_not_exist_is_one_line_naming_it_typed_and_resolved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        resolve_root("images")
    assert str(err.value) == f"--image-root images: no such folder (resolved to {tmp_path.resolve()}/images)"
    with pytest.raises(UserError, match=r"^--image-root memory://nowhere/x: no such folder$"):
        resolve_root("memory://nowhere/x")


def test_a_file_url_root_is_the_local_folder(loose):
    assert resolve_root(loose.root.as_uri()).resolved == os.path.realpath(loose.root)


def test_a_memory_url_root_reads_what_the_local_root_reads(wds):
    import fsspec

    fs = fsspec.filesystem("memory")
    for path in wds.root.iterdir():
        fs.pipe(f"/i2d-{os.getpid()}/{path.name}", path.read_bytes())
    source = ImageSource(f"memory://i2d-{os.getpid()}")
    assert source.root.remote and by_key(source, wds.refs) == by_key(ImageSource(wds.root), wds.refs)
    assert set(source.stats.opened.values()) == {1}
    fs.rm(f"/i2d-{os.getpid()}", recursive=True)


def test_a_source_travels_to_worker_processes_with_its_download_index(wds):
    import pickle

    source = ImageSource(wds.root)
    images = list(wds.refs.values())
    assert pickle.loads(pickle.dumps(source)).map(images, raw) == source.map(images, raw)
    index = source.downloads()
    assert len(index.found) == N_PICTURES
    assert pickle.loads(pickle.dumps(source)).downloads().found == index.found


# -- loud failure --------------------------------------------------------------------------------


def test_counts_stop_a_run_with_one_line_when_most_images_are_missing(wds, tmp_path):
    root = resolve_root(wds.root)
    images = [f"0000{i}.tar#nothing.jpg" for i in range(3)] + list(wds.refs.values())[:2]
    counts = ImageCounts()
    for i, result in ImageSource(root).stream(images, raw):
        counts.add(result, images[i])
    assert (counts.checked, counts.missing, counts.found) == (5, 3, 2)
    with pytest.raises(UserError) as err:
        check_missing("curate", counts, root, 0.5)
    line = str(err.value)
    assert line.startswith("curate: 3 of 5 images not found (60.0%) under ")
    assert f"tried {root.resolved}/00000.tar#nothing.jpg (no member nothing.jpg in 00000.tar)" in line
    assert "\n" not in line
    check_missing("curate", counts, root, 0.6)  # 3 of 5 is not more than 0.6
    halves = ImageCounts.from_dict(counts.as_dict()).merge(ImageCounts(checked=5))
    assert (halves.checked, halves.missing, halves.tried) == (10, 3, counts.tried)
    check_missing("curate", halves, root, 0.5)


def test_counts_name_the_root_as_typed_when_it_was_relative(wds, monkeypatch):
    monkeypatch.chdir(wds.root.parent)
    root = resolve_root(wds.root.name)
    counts = ImageCounts()
    counts.add(ImageProblem(MISSING, "no file a.jpg under the image root"), "a.jpg")
    with pytest.raises(UserError, match=rf"under {root.resolved} \(typed as {wds.root.name}\)"):
        check_missing("score", counts, root)


def test_max_missing_images_is_a_share(tmp_path):
    assert check_max_missing(0.5) == 0.5
    for bad in (math.nan, math.inf, -0.1, 1.5):
        with pytest.raises(UserError, match="--max-missing-images"):
            check_max_missing(bad)
    assert no_root_line("curate") == (
        "curate: no --image-root given (and none recorded in the input's manifest): images were not opened"
    )


def test_an_unreadable_image_is_found_not_missing():
    counts = ImageCounts()
    counts.add(ImageProblem(UNREADABLE, "x.jpg: truncated"), "x.jpg")
    counts.add(b"ok", "y.jpg")
    assert (counts.checked, counts.missing, counts.unreadable, counts.found) == (2, 0, 1, 2)
    assert json.loads(json.dumps(counts.as_dict()))["unreadable"] == 1
