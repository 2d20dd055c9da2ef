"""Hostile image files and paths (issue 25): the image root is a boundary, reads are bounded and never
block, and every stage decodes a picture to the same pixels.

One folder holds every hostile path at once (a FIFO, a symlink to /dev/zero, `../`, an absolute
path, a symlink out, a symlink loop, a NUL byte, a 1 GB sparse '.jpg'), put into a prepared
shard by editing it, as a foreign or hand-edited folder would; each stage that opens images
(curate, pack, train, eval, probe) reads it. Commands that could hang run in a subprocess
with a timeout, so a regression fails instead of blocking the suite.
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path

import numpy as np
import pytest
from curate_fixtures import caption
from fault_fixtures import cli, edit_images, peak_kib
from pictures import encoded, picture, picture_file, png_header, scene, write

GOOD = 6
BIG = 1024**3  # the sparse '.jpg': 1 GiB of holes, no disk used
# rows whose path the image root refuses (eval and probe skip these with a count)
PATH_ROWS = {
    "dev_zero": "zero.jpg",  # a symlink to /dev/zero
    "dotdot": "../outside/secret.png",
    "absolute": None,  # the absolute path of outside/secret.png, set by the fixture
    "symlink_out": "sub/out.png",
    "symlink_loop": "loop.png",
    "nul": "img/\x00c0.png",
}
# rows inside the root that are not image files (eval and probe refuse the run in one line)
FILE_ROWS = {"fifo": "fifo.png", "big": "big.jpg"}


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict:
    """images/ (the root: good pictures and every hostile file), outside/secret.png, and prepared
    folders whose rows are the GOOD pictures then the hostile paths (`all`) or only PATH_ROWS (`paths`)."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("hostile")
    images, outside = root / "images", root / "outside"
    (images / "sub").mkdir(parents=True)
    for i in range(GOOD):
        write(scene(100 + i), images / "img" / f"c{i}.png")
    write(scene(999), outside / "secret.png")
    os.mkfifo(images / "fifo.png")
    os.symlink("/dev/zero", images / "zero.jpg")
    os.symlink("../../outside/secret.png", images / "sub" / "out.png")
    os.symlink("loop2.png", images / "loop.png")
    os.symlink("loop.png", images / "loop2.png")
    with open(images / "big.jpg", "wb") as fh:
        fh.truncate(BIG)
    paths = {**PATH_ROWS, "absolute": str(outside / "secret.png")}
    rng = random.Random(3)
    hostile = {**paths, **FILE_ROWS}
    rows = [f"img/c{i}.png" for i in range(GOOD)] + [f"placeholder/{name}.png" for name in hostile]
    table = root / "table.jsonl"
    table.write_text("".join(json.dumps({"image": r, "caption": caption(rng)}) + "\n" for r in rows), "utf-8")
    folders = {}
    for variant, names in (("all", list(hostile)), ("paths", list(paths))):
        folder = root / f"prepared-{variant}"
        prepare([table], folder, PrepareOptions(format="table", quiet=True))
        edit = {GOOD + i: hostile[name] for i, name in enumerate(hostile) if name in names}
        edit.update({GOOD + i: f"img/c{i % GOOD}.png" for i, name in enumerate(hostile) if name not in names})
        edit_images(folder, edit)
        folders[variant] = folder
    keys = _keys(folders["all"])
    return {
        "root": root,
        "images": images,
        "secret": (outside / "secret.png").read_bytes(),
        "all": folders["all"],
        "paths": folders["paths"],
        "hostile": {keys[GOOD + i]: name for i, name in enumerate(hostile)},
        "good": set(keys[:GOOD]),
    }


def _keys(folder: Path) -> list[str]:
    from caption_debias.dataset import PreparedDataset

    return PreparedDataset.open(folder).read(["key"]).column("key").to_pylist()


def _removed(folder: Path) -> dict[str, dict]:
    lines = (folder / "removed.jsonl").read_text("utf-8").splitlines()
    return {d["key"]: d for d in map(json.loads, lines)}


def _assert_details(details: dict[str, str], outside: Path | None = None) -> None:
    """What the user reads for each hostile row (the detail of its removal or skip); none names
    where a symlink out of the root points (`outside`, the folder beside the root)."""
    if outside is not None:  # the rows' own text aside (an absolute path row), no symlink target
        leaked = {
            n: details[n] for n in ("symlink_out", "dev_zero") if str(outside) in details[n] or "/dev" in details[n]
        }
        assert not leaked, leaked
    assert "a FIFO, not a file" in details["fifo"]
    assert "1,073,741,824 bytes, more than the maximum" in details["big"]
    for name in ("dev_zero", "symlink_out"):
        assert "outside the image root" in details[name], details[name]
    assert "escapes the image root" in details["dotdot"]
    assert "absolute image path" in details["absolute"]
    assert "symbolic links" in details["symlink_loop"]
    assert "control character in image path: U+0000" in details["nul"]


# -- every stage that opens images, on every hostile path --------------------------------------


def test_curate_removes_each_hostile_path_as_image_unreadable_and_embeds_nothing_from_outside(world, tmp_path):
    import pyarrow.parquet as pq

    out = tmp_path / "curated"
    proc = cli(
        "curate", str(world["all"]), "--out", str(out), "--image-root", str(world["images"]), "-q", "--embed-images"
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    removed = _removed(out)
    details = {}
    for key, name in world["hostile"].items():
        assert removed[key]["reason"] == "image_unreadable", (name, removed.get(key))
        details[name] = removed[key]["detail"]["error"]
    _assert_details(details, world["root"] / "outside")
    kept = pq.read_table(sorted(out.glob("shards/*.parquet"))).to_pylist()
    assert {r["key"] for r in kept} == world["good"]
    assert all(r["image_bytes"] == (world["images"] / r["image"]).read_bytes() for r in kept)
    assert world["secret"] not in [r["image_bytes"] for r in kept]
    assert peak_kib(proc) < 700 * 1024  # the 1 GiB '.jpg' was never read


def test_score_removes_each_hostile_path_as_image_unreadable(world, tmp_path):
    """score reads images through the same boundary: one removal a hostile row, nothing from outside."""
    out = tmp_path / "scored"
    proc = cli(
        "score",
        str(world["all"]),
        "--out",
        str(out),
        "--image-root",
        str(world["images"]),
        "--model",
        "tiny",
        "--reference-images",
        "4",
        "-q",
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    removed = _removed(out)
    assert set(removed) == set(world["hostile"])
    assert {d["reason"] for d in removed.values()} == {"image_unreadable"}
    _assert_details(
        {name: removed[key]["detail"]["error"] for key, name in world["hostile"].items()}, world["root"] / "outside"
    )
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    assert manifest["counts"]["written"] == GOOD
    assert peak_kib(proc) < 900 * 1024  # the 1 GiB '.jpg' was never read


def test_pack_removes_each_hostile_path_as_image_unreadable(world, tmp_path):
    out = tmp_path / "packed"
    proc = cli(
        "pack", str(world["all"]), "--out", str(out), "--image-root", str(world["images"]), "--image-size", "32", "-q"
    )
    assert proc.returncode == 0, proc.stderr
    removed = _removed(out)
    assert set(removed) == set(world["hostile"])
    assert {d["reason"] for d in removed.values()} == {"image_unreadable"}
    _assert_details({world["hostile"][k]: d["detail"] for k, d in removed.items()}, world["root"] / "outside")
    manifest = json.loads((out / "manifest.json").read_text("utf-8"))
    assert manifest["counts"]["written"] == GOOD
    assert peak_kib(proc) < 700 * 1024


def test_train_skips_each_hostile_image_with_a_count(world, tmp_path):
    run = tmp_path / "run"
    n = GOOD + len(world["hostile"])
    args = ["--model", "tiny", "--batch-size", str(n), "--max-steps", "1", "--precision", "fp32", "--workers", "0"]
    args += ["--report-to", ""]
    proc = cli("train", str(world["all"]), "--image-root", str(world["images"]), "--out", str(run), "-q", *args)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    last = json.loads((run / "metrics.jsonl").read_text("utf-8").splitlines()[-1])
    assert last["skipped_images"] == len(world["hostile"])  # one epoch of one batch: each row once
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias: skipped unreadable")]
    details = {}
    for line in skipped:
        key = line.split("(key ", 1)[1].split(")", 1)[0]
        details[world["hostile"][key]] = line
    assert set(details) == set(world["hostile"].values())
    _assert_details(details)
    assert peak_kib(proc) < 1500 * 1024  # torch and the model, but never the 1 GiB file


@pytest.fixture(scope="module")
def tiny():
    from caption_debias.model.load import load_model

    return load_model("tiny")


def test_eval_skips_paths_outside_the_root_with_a_count(world, tiny):
    from caption_debias.evaluate.retrieval import as_data, evaluate

    data = as_data(world["paths"], world["images"])
    assert data.info["skipped_outside_image_root"] == len(PATH_ROWS)
    real = world["images"].resolve()
    assert all(p.resolve().is_relative_to(real) for p in data.images)
    assert data.n_images == GOOD
    table = evaluate(tiny, data)
    assert 0 <= table["keep"]["t2i"]["r1"] <= 100


def test_probe_skips_paths_outside_the_root_with_a_count(world, tiny):
    from caption_debias.evaluate.probe import probe

    result = probe({"tiny": tiny}, world["paths"], None, image_root=world["images"])
    assert result["data"]["skipped_outside_image_root"] == len(PATH_ROWS)
    assert result["data"]["images"] == GOOD


@pytest.mark.parametrize("name", sorted(FILE_ROWS))
def test_eval_refuses_a_special_or_huge_file_in_one_line(world, tiny, tmp_path, name):
    """A FIFO or a 1 GB file inside the root is one clear error for eval (its set must be whole), never a hang."""
    import shutil

    from caption_debias.errors import UserError
    from caption_debias.evaluate.retrieval import evaluate

    folder = tmp_path / "one-bad"
    shutil.copytree(world["paths"], folder)
    edit_images(folder, {0: FILE_ROWS[name]})
    with pytest.raises(UserError, match=FILE_ROWS[name]) as err:
        evaluate(tiny, (folder, world["images"]))
    assert len(str(err.value).splitlines()) == 1
    assert ("not a regular file" if name == "fifo" else "1,073,741,824 bytes, more than the maximum") in str(err.value)


# -- the shared rules, one call each -----------------------------------------------------------


def test_image_root_resolve_names_each_refusal(world):
    from caption_debias.image_files import MISSING, UNREADABLE, ImageProblem, ImageRoot

    root = ImageRoot(world["images"])
    assert root.resolve("img/c0.png") == (world["images"] / "img" / "c0.png").resolve()
    with pytest.raises(ImageProblem) as gone:
        root.resolve("img/none.png")
    assert gone.value.reason == MISSING
    for image in [*PATH_ROWS.values()][:-1] + ["img/\x00c0.png", "img/c0.png\n", "C:\\x.png", 7]:
        if image is None:
            continue
        with pytest.raises(ImageProblem) as refused:
            root.resolve(image)
        assert refused.value.reason == UNREADABLE, image


def test_read_regular_refuses_devices_fifos_and_large_files_without_reading(world, tmp_path):
    from caption_debias.image_files import ImageProblem, read_regular

    for path, what in (("/dev/zero", "a character device"), (world["images"] / "fifo.png", "a FIFO")):
        with pytest.raises(ImageProblem, match=what):
            read_regular(path)
    with pytest.raises(ImageProblem, match="1,073,741,824 bytes"):
        read_regular(world["images"] / "big.jpg")
    small = tmp_path / "s.bin"
    small.write_bytes(b"x" * 100)
    assert read_regular(small) == b"x" * 100
    with pytest.raises(ImageProblem, match="100 bytes, more than the maximum 99"):
        read_regular(small, max_bytes=99)


def test_prepare_rejects_control_characters_in_image_paths(tmp_path):
    from caption_debias.dataset import PreparedDataset
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    rows = [
        {"image": "ok.jpg", "caption": "A red kite."},
        {"image": "a\x00b.jpg", "caption": "A red kite."},
        {"image": "tab\there.jpg", "caption": "A red kite."},
        {"image": "del\x7f.jpg", "caption": "A red kite."},
        {"image": "https://x.org/\x00.jpg", "caption": "A red kite."},
    ]
    table = tmp_path / "t.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    manifest = prepare([table], tmp_path / "p", PrepareOptions(format="table", quiet=True))
    assert manifest["counts"]["written"] == 1
    reasons = manifest["counts"]["rejects_by_reason"]
    assert reasons == {"control character in image path": 3, "control character in image URL": 1}
    rejects = list(PreparedDataset.open(tmp_path / "p").rejects())
    assert any("U+0000 at 1" in r["reason"] for r in rejects)


# -- one decode: pack and train give the pixels Pillow's own conversions give -----------------


KINDS = ["rgb16", "grey16", "palette_transparent", "cmyk", "la", "rgba", "exif_rotated"]


@pytest.mark.parametrize("kind", KINDS)
def test_train_and_pack_decode_to_pillows_own_conversion(tmp_path, kind):
    from caption_debias.pack.images import ImageReader, _resizer_class
    from caption_debias.pack.options import PackOptions
    from caption_debias.train.data import FolderImages

    name, reference = picture_file(kind, tmp_path)
    got = FolderImages(tmp_path).open("k", name)
    assert got.mode == "RGB" and np.array_equal(np.asarray(got), np.asarray(reference.convert("RGB")))
    options = PackOptions(image_root=str(tmp_path), image_size=40)
    packed = ImageReader(tmp_path, options).resized(name)
    lossless = encoded(reference, "PNG")  # the resizer given the reference picture, without loss
    resizer = _resizer_class()(
        40, options.resize_mode, False, encode_format="jpg", encode_quality=options.encode_quality
    )
    assert packed.jpg == resizer(io.BytesIO(lossless))[0]
    assert (packed.original_width, packed.original_height) == reference.size


@pytest.mark.parametrize("kind", ["rgb16", "grey16"])
def test_curate_hashes_high_bit_depth_as_its_8_bit_picture(tmp_path, kind):
    from caption_debias.curate.images import OK, image_facts

    name, reference = picture_file(kind, tmp_path)
    write(reference, tmp_path / "eight.png")
    wide, eight = image_facts(tmp_path / name), image_facts(tmp_path / "eight.png")
    assert wide.status == eight.status == OK
    assert wide.phash == eight.phash and (wide.width, wide.height) == (eight.width, eight.height)


# -- one pixel rule for curate and pack ---------------------------------------------------------


def _both_stages(folder: Path, name: str) -> tuple[str | None, str | None]:
    """(curate's error, pack's error) for image `name` in `folder`; None where the stage takes the image."""
    from caption_debias.curate.images import OK, image_facts
    from caption_debias.pack.images import ImageFailed, ImageReader
    from caption_debias.pack.options import PackOptions

    facts = image_facts(folder / name)
    try:
        ImageReader(folder, PackOptions(image_root=str(folder), image_size=32)).resized(name)
        packed = None
    except ImageFailed as failed:
        packed = failed.detail
    return (None if facts.status == OK else facts.error), packed


def test_curate_and_pack_share_one_pixel_rule(tmp_path):
    """Just past Pillow's bomb warning (10000 x 10000) the size is no fault in either stage; past
    MAX_PIXELS it is image_unreadable in both. Header-only PNGs: the rule is decided before decoding."""
    from caption_debias.image_files import MAX_PIXELS

    side = int(MAX_PIXELS**0.5) + 1
    (tmp_path / "bomb.png").write_bytes(png_header(side, side))
    (tmp_path / "large.png").write_bytes(png_header(10000, 10000))
    for error in _both_stages(tmp_path, "bomb.png"):
        assert f"more than the maximum {MAX_PIXELS:,}" in error
    for error in _both_stages(tmp_path, "large.png"):  # no pixel data: a decode error, not the size rule
        assert "maximum" not in error and "Bomb" not in error and "bomb" not in error, error


def test_a_10000_square_png_is_kept_by_curate_and_packed_by_pack(tmp_path):
    write(
        picture((10000, 10000), 40, ("rectangle", (2000, 3000, 7000, 6000), 220), mode="L"),
        tmp_path / "large.png",
        compress_level=1,
    )
    assert _both_stages(tmp_path, "large.png") == (None, None)
