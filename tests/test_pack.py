"""caption-debias pack: tars read back by webdataset's own reader and open_clip_train's pipeline;
counts, removals, same bytes for any --workers and engine, resume, lock, CLI errors."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from cli_process import run_cli
from pictures import encoded, not_a_picture, picture, tint, truncated, write
from PIL import Image
from train_fixtures import wds_args

from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.locking import FolderLocked
from caption_debias.pack.folder import PackedFolder, is_packed
from caption_debias.pack.options import PackOptions
from caption_debias.pack.run import pack

SIZE = 48  # --image-size of the tests
PER_TAR = 8


def _picture(i: int, size: tuple[int, int], mode: str = "RGB") -> Image.Image:
    w, h = size
    return picture(size, tint(i), ("ellipse", (w // 5, h // 5, w // 2 + i % 7, h // 2), (250, 20, 90))).convert(mode)


def make_world(root: Path) -> tuple[Path, Path]:
    """A prepared folder over 26 rows: PNGs and JPEGs of several sizes and modes, two rows in an
    img2dataset-style tar, and rows whose image is missing, junk, truncated or not in its tar."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    images = root / "images"
    (images / "sub").mkdir(parents=True)
    rows = []
    for i in range(20):
        size = [(64, 64), (200, 120), (90, 300), (30, 20)][i % 4]
        name = f"sub/p{i:02d}.png" if i % 3 else f"j{i:02d}.jpg"
        mode = "L" if i == 4 else "RGBA" if i == 7 else "RGB"
        write(_picture(i, size, mode), images / name)
        rows.append((name, i))
    bundle = encoded(_picture(50, (80, 60)), "JPEG")
    with tarfile.open(images / "bundle.tar", "w") as tar:
        for member in ("000000001.jpg", "000000002.jpg"):
            info = tarfile.TarInfo(member)
            info.size = len(bundle)
            tar.addfile(info, io.BytesIO(bundle))
    rows += [("bundle.tar#000000001.jpg", 20), ("bundle.tar#000000002.jpg", 21)]
    rows.append(("nowhere.png", 22))  # image_missing
    not_a_picture(images / "junk.png", "this is not an image")
    rows.append(("junk.png", 23))  # image_unreadable
    truncated(images / "cut.jpg", encoded(_picture(24, (120, 90)), "JPEG"))
    rows.append(("cut.jpg", 24))  # image_unreadable (truncated)
    rows.append(("bundle.tar#000000009.jpg", 25))  # image_missing (no such member)
    table = []
    for name, i in rows:
        caption = f"This image shows shape {i}. Its colour is number {i % 5}. The background is plain."
        table.append({"key": f"k{i}", "image": name, "caption": caption})
    (root / "table.jsonl").write_text("".join(json.dumps(r) + "\n" for r in table), "utf-8")
    prepared = root / "prepared"
    prepare([root / "table.jsonl"], prepared, PrepareOptions(format="table", quiet=True, shard_rows=10))
    prepare([root / "table.jsonl"], root / "prepared-val", PrepareOptions(format="table", quiet=True, split="val"))
    return prepared, images


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("packworld")
    prepared, images = make_world(root)
    out = root / "packed"
    manifest = pack(prepared, out, _options(images))
    return prepared, images, out, manifest


def _options(images: Path, **kw) -> PackOptions:
    return PackOptions(image_root=str(images), image_size=SIZE, samples_per_shard=PER_TAR, quiet=True, **kw)


def _digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}


def _pattern(out: Path, manifest: dict) -> str:
    return str(out / manifest["train_data"])


def test_counts_reconcile_and_failed_images_are_reported(world):
    prepared, images, out, manifest = world
    c = manifest["counts"]
    assert c["read"] == 26 and c["read"] == c["written"] + c["removed"]
    assert c["removed_by_reason"] == {"image_missing": 2, "image_unreadable": 2}
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert [(r["key"], r["reason"]) for r in removed] == [
        ("table/k22", "image_missing"),
        ("table/k23", "image_unreadable"),
        ("table/k24", "image_unreadable"),
        ("table/k25", "image_missing"),
    ]
    assert all({"key", "reason", "detail", "image", "caption"} <= set(r) for r in removed)
    assert "nowhere.png" in removed[0]["detail"] and "000000009.jpg" in removed[3]["detail"]
    # Tars 00000..00003 (26 rows / 8), contiguous; the 4 failures are rows 22-25: tar 2 keeps 6, tar 3 keeps 0.
    assert [t["path"] for t in manifest["tars"]] == ["00000.tar", "00001.tar", "00002.tar", "00003.tar"]
    assert [t["samples"] for t in manifest["tars"]] == [8, 8, 6, 0]
    assert json.loads((out / "sizes.json").read_text()) == {t["path"]: t["samples"] for t in manifest["tars"]}
    assert _digests(out) == {t["path"]: t["sha256"] for t in manifest["tars"]}
    assert manifest["train_data"] == "{00000..00003}.tar"
    assert is_packed(out) and not is_packed(prepared)


def test_webdataset_reader_reads_every_sample_as_packed(world):
    import webdataset as wds

    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    from img2dataset.resizer import Resizer

    prepared, images, out, manifest = world
    rows = {r["key"]: r for r in PreparedDataset.open(prepared).read().to_pylist()}
    resizer = Resizer(SIZE, "keep_ratio", False, encode_quality=95)
    samples = list(wds.WebDataset(_pattern(out, manifest), shardshuffle=False))
    assert len(samples) == manifest["counts"]["written"] == 22
    assert [s["__key__"] for s in samples[:3]] == ["000000", "000001", "000002"]  # tar number + row position
    assert samples[8]["__key__"] == "000010"  # first row of tar 1
    for s in samples:
        doc = json.loads(s["json"])
        row = rows[doc["key"]]
        assert s["txt"].decode() == row["caption"]
        assert doc["sentences"] == row["sentences"] and doc["sentence_tokens"] == row["sentence_tokens"]
        assert doc["summary_mask"] == row["summary_mask"] and doc["source"] == "table"
        assert doc["split"] == row["split"] and doc["image"] == row["image"]
        # The image is img2dataset's resizer output for the original bytes, byte for byte.
        if ".tar#" in row["image"]:
            tar_name, member = row["image"].split("#")
            with tarfile.open(images / tar_name) as tar:
                raw = tar.extractfile(member).read()
        else:
            raw = (images / row["image"]).read_bytes()
        assert s["jpg"] == resizer(io.BytesIO(raw))[0]
        with Image.open(io.BytesIO(s["jpg"])) as im:
            assert min(im.size) == SIZE and im.size == (doc["width"], doc["height"])  # keep_ratio: shorter side
    decoded = next(iter(wds.WebDataset(_pattern(out, manifest), shardshuffle=False).decode("pilrgb")))
    assert decoded["jpg"].mode == "RGB"


def test_the_resizer_is_img2dataset_imported_as_a_package():
    """pack resizes with img2dataset's own class, imported as its package exposes it (issue 39,
    item 6), not a copy of its module file loaded by path."""
    from img2dataset.resizer import Resizer

    from caption_debias.pack.images import _resizer_class

    assert _resizer_class() is Resizer


def test_open_clip_train_pipeline_reads_the_tars(world):
    import open_clip
    from open_clip_train.data import get_dataset_size, get_wds_dataset

    prepared, images, out, manifest = world
    pattern = _pattern(out, manifest)
    assert get_dataset_size(pattern) == (22, 4)  # from sizes.json: no --train-num-samples needed
    preprocess = open_clip.image_transform(32, is_train=False)
    tokenizer = open_clip.get_tokenizer("ViT-B-32")
    args = wds_args(pattern, val_data=pattern)
    # Evaluation pipeline: every sample once, in tar order.
    val = get_wds_dataset(args, preprocess, is_train=False, tokenizer=tokenizer)
    images_seen, texts = zip(*val.dataloader)
    texts = open_clip.tokenize(["x"])[:0].new_tensor(list(t for batch in texts for t in batch.tolist()))
    captions = [s["txt"].decode() for s in __import__("webdataset").WebDataset(pattern, shardshuffle=False)]
    assert texts.shape == (22, 77) and (texts == tokenizer(captions)).all()
    assert sum(len(b) for b in images_seen) == 22 and images_seen[0].shape[1:] == (3, 32, 32)
    # Training pipeline (shard and sample shuffles, epoch length from sizes.json).
    train = get_wds_dataset(args, preprocess, is_train=True, epoch=0, tokenizer=tokenizer)
    batches = list(train.dataloader)
    assert train.dataloader.num_samples == 25 and len(batches) == 5  # ceil(22 / 5) full batches
    got = {tuple(t.tolist()) for _, text in batches for t in text}
    assert got <= {tuple(t.tolist()) for t in tokenizer(captions)} and len(got) > 10


def _open_clip_args(line: str) -> dict[str, str]:
    """--train-data and --train-num-samples of pack's printed open_clip_train line, as a shell splits it."""
    words = shlex.split(line.split("open_clip_train:", 1)[1])
    return {w: words[i + 1] for i, w in enumerate(words) if w in ("--train-data", "--train-num-samples")}


def test_the_printed_line_for_an_s3_out_trains_through_open_clip_train(world, capsys):
    """pack --out s3://...: the printed --train-data opens with webdataset's own gopen (its `pipe:`
    running `aws s3 cp ... -` against moto on loopback); bare s3:// URLs have no gopen handler."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    if shutil.which("aws") is None:
        pytest.skip("no aws CLI (pip install awscli)")
    import open_clip
    from image_worlds import moto_s3
    from open_clip_train.data import get_wds_dataset

    prepared, images, out, manifest = world
    with moto_s3() as (server, fs, bucket):
        url = f"s3://{bucket}/packed"
        options = PackOptions(image_root=str(images), image_size=SIZE, samples_per_shard=PER_TAR)
        pack(prepared, url, options)
        line = next(x for x in capsys.readouterr().err.splitlines() if "open_clip_train:" in x)
        flags = _open_clip_args(line)
        assert flags["--train-data"] == f"pipe:aws s3 cp {url}/{{00000..00003}}.tar -", line
        assert flags["--train-num-samples"] == "22", line
        tokenizer = open_clip.get_tokenizer("ViT-B-32")
        args = wds_args(flags["--train-data"], train_num_samples=int(flags["--train-num-samples"]))
        train = get_wds_dataset(args, open_clip.image_transform(32, is_train=True), True, epoch=0, tokenizer=tokenizer)
        batches = list(train.dataloader)
        tar_gets = server.gets(".tar")
    local = {s["txt"] for s in __import__("webdataset").WebDataset(_pattern(out, manifest), shardshuffle=False)}
    captions = {tuple(t.tolist()) for t in tokenizer([c.decode() for c in local])}
    assert len(batches) == 5 and {tuple(t.tolist()) for _, text in batches for t in text} <= captions
    assert sum(len(images) for images, _ in batches) == 25 and len(tar_gets) >= 4  # every tar read from the store


def test_the_printed_line_for_a_local_out_is_the_folders_pattern(world):
    from caption_debias.pack.run import open_clip_train_flags

    prepared, images, out, manifest = world
    assert open_clip_train_flags(out, manifest) == f"--train-data '{_pattern(out, manifest)}'"
    line = open_clip_train_flags("memory://bucket/p", manifest)
    assert _open_clip_args("open_clip_train: " + line)["--train-data"].startswith("pipe:python -c ")


def test_random_access_reader_matches_the_tars(world):
    prepared, images, out, manifest = world
    folder = PackedFolder(out)
    assert len(folder) == 22
    assert folder.name(8) == "00001.tar#000010" and folder.json(8)["key"] == "table/k8"
    assert folder.member(21, "txt").decode().startswith("This image shows shape 21.")
    with pytest.raises(IndexError):
        folder.locate(22)


def test_a_tar_of_another_size_than_the_manifest_says_is_refused_in_one_line(world, tmp_path):
    import shutil

    from caption_debias.errors import UserError

    _, _, out, _ = world
    copy = tmp_path / "packed"
    shutil.copytree(out, copy)
    with open(copy / "00001.tar", "r+b") as fh:  # a copy cut short
        fh.truncate(fh.seek(0, 2) - 512)
    with pytest.raises(UserError) as err:
        PackedFolder(copy)
    assert "00001.tar" in str(err.value) and "the manifest says" in str(err.value)


def test_same_bytes_for_any_workers(world, tmp_path):
    prepared, images, out, manifest = world
    two = pack(prepared, tmp_path / "two", _options(images, workers=2))
    assert _digests(tmp_path / "two") == _digests(out)
    assert two["counts"] == manifest["counts"]
    assert (tmp_path / "two" / "removed.jsonl").read_bytes() == (out / "removed.jsonl").read_bytes()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_same_bytes_on_ray(world, tmp_path, ray_runtime):
    prepared, images, out, manifest = world
    pack(prepared, tmp_path / "ray", _options(images, engine="ray", workers=2))
    assert _digests(tmp_path / "ray") == _digests(out)


def test_split_packs_only_that_split(world, tmp_path):
    prepared, images, out, manifest = world
    with_split = prepared.parent / "prepared-val"  # the same rows, prepared with --split val
    val = pack(with_split, tmp_path / "val", _options(images, split="val"))
    folder = PackedFolder(tmp_path / "val")
    assert val["counts"] == {**manifest["counts"]} and len(folder) == 22
    assert {folder.json(i)["split"] for i in range(len(folder))} == {"val"}
    with pytest.raises(UserError, match="no rows to pack in split 'train'"):
        pack(with_split, tmp_path / "none", _options(images, split="train"))
    with pytest.raises(UserError, match="no rows to pack in split 'val'"):
        pack(prepared, tmp_path / "none2", _options(images, split="val"))


def test_rerun_reuses_finished_tars_and_redoes_the_rest(world, tmp_path):
    prepared, images, out, manifest = world
    again = tmp_path / "again"
    pack(prepared, again, _options(images))
    first = again / "00000.tar"
    before = first.stat().st_mtime_ns
    # As after a kill: a tar and the manifest gone, a half-written temp file left.
    (again / "00002.tar").unlink()
    (again / "manifest.json").unlink()
    (again / ".00003.tar.tmp-999").write_bytes(b"partial")
    resumed = pack(prepared, again, _options(images, workers=2))
    assert first.stat().st_mtime_ns == before  # reused, not rewritten
    assert _digests(again) == _digests(out) and resumed["counts"] == manifest["counts"]
    assert not list(again.glob(".*.tmp-*"))
    with pytest.raises(UserError, match="different options"):
        pack(prepared, again, _options(images, encode_quality=80))
    redone = pack(prepared, again, _options(images, encode_quality=80, overwrite=True))
    assert redone["image"]["encode_quality"] == 80 and _digests(again) != _digests(out)


def test_pack_refuses_a_folder_another_command_writes(world, tmp_path):
    prepared, images, out, manifest = world
    hold = "import sys, time\nfrom caption_debias.locking import folder_lock\nwith folder_lock(sys.argv[1], 'curate'):\n    print('held', flush=True)\n    time.sleep(60)\n"
    child = subprocess.Popen([sys.executable, "-c", hold, str(tmp_path / "busy")], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(FolderLocked, match="curate"):
            pack(prepared, tmp_path / "busy", _options(images))
    finally:
        child.kill()
        child.wait()


def _cli(*args):
    return run_cli("pack", *args)


def test_cli_packs_and_bad_input_is_one_line(world, tmp_path):
    prepared, images, out, manifest = world
    r = _cli(
        str(prepared),
        "--image-root",
        str(images),
        "--out",
        str(tmp_path / "cli"),
        "--image-size",
        str(SIZE),
        "--samples-per-shard",
        str(PER_TAR),
    )
    assert r.returncode == 0, r.stderr
    assert _digests(tmp_path / "cli") == _digests(out)
    assert "removed 4" in r.stderr and "--train-data" in r.stderr
    for args, words in (
        ([str(images), "--image-root", str(images), "--out", str(tmp_path / "x")], "not a prepared folder"),
        ([str(prepared), "--image-root", str(tmp_path / "nope"), "--out", str(tmp_path / "x")], "no such folder"),
        (
            [str(prepared), "--image-root", str(images), "--out", str(tmp_path / "x"), "--resize-mode", "squash"],
            "--resize-mode",
        ),
        ([str(prepared), "--image-root", str(images), "--out", str(images)], "not empty"),
    ):
        r = _cli(*args)
        assert r.returncode == 2 and words in r.stderr, (args, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr


def test_a_worker_resizes_with_img2dataset_resizer_without_its_downloader(tmp_path):
    """pack/images.py takes img2dataset's Resizer from its module without running the package's
    __init__ (the downloader: pandas, wandb, ray), leaves no trace of either in sys.modules, and
    resizes as the Resizer of the whole package does, byte for byte."""
    _picture(3, (90, 60)).save(tmp_path / "one.png")
    code = (
        "import json, sys\n"
        "from caption_debias.pack.images import ImageReader\n"
        "from caption_debias.pack.options import PackOptions\n"
        f"options = PackOptions(image_root=sys.argv[1], image_size={SIZE})\n"
        "data = open(sys.argv[1] + '/one.png', 'rb').read()\n"
        "ours = ImageReader(sys.argv[1], options).resize_bytes(data, 'one.png').jpg\n"
        "loaded = sorted(m for m in ('img2dataset', 'img2dataset.main', 'wandb', 'ray') if m in sys.modules)\n"
        "from img2dataset import download  # the whole package still imports as usual after\n"
        "theirs = ImageReader(sys.argv[1], options).resize_bytes(data, 'one.png').jpg\n"
        "print(json.dumps({'loaded': loaded, 'same': ours == theirs, 'package': callable(download)}))\n"
    )
    env = {**os.environ, "NO_ALBUMENTATIONS_UPDATE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"loaded": [], "same": True, "package": True}
