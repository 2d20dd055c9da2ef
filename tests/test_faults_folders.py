"""Folders that point elsewhere, and small hostile inputs (issue 32, sections 3 and 4).

A manifest is data: one edited to list a shard outside its folder is refused by every reader
before a byte of that shard is read. No command reads an input that lies inside, is, or holds
the place it writes. A damaged Parquet page is one line naming the input file at fault, never
blamed on the file being written. Every command here runs for real (the CLI in a subprocess,
real Parquet, real images, the tiny open_clip model for score, eval and train).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cli_process import run_cli
from input_fixtures import sharegpt_element
from pictures import picture, write

from caption_debias.errors import UserError
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare
from caption_debias.records import Record, Reject

SECRET = "VICTIMSECRET"


cli = run_cli


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def element(i: int, text: str) -> dict:
    return sharegpt_element(i, f"img/{i % 4}.png", text)


def make_folder(root: Path, name: str, n: int, word: str, shard_rows: int = 4) -> Path:
    src = root / f"{name}.json"
    rows = [element(i, f"Photo {i} of {word} shows a harbour at dusk. Boats are moored. Hills rise.") for i in range(n)]
    src.write_text(json.dumps(rows))
    prepare([src], root / name, PrepareOptions(quiet=True, shard_rows=shard_rows))
    return root / name


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("folders")
    for i in range(4):
        write(picture((48, 40), (40 * i, 90, 200 - 30 * i)), root / "img" / f"{i}.png")
    make_folder(root, "victim", 4, SECRET)
    make_folder(root, "mine", 8, "a quiet town")
    return root


def manifest_of(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text("utf-8"))


def write_manifest(folder: Path, manifest: dict) -> None:
    (folder / "manifest.json").write_text(json.dumps(manifest), "utf-8")


def pointing_out(world: Path, tmp_path: Path, how: str) -> Path:
    """A copy of `mine` whose manifest lists the victim's shard (with its digest and row count) as its first."""
    folder = tmp_path / f"points-{how}"
    shutil.copytree(world / "mine", folder)
    victim = world / "victim" / "shards" / "part-00000.parquet"
    entry = manifest_of(world / "victim")["shards"][0]
    m = manifest_of(folder)
    if how == "climb":
        path = os.path.relpath(victim, folder)  # ../../…/victim/shards/part-00000.parquet
    elif how == "absolute":
        path = str(victim)
    else:  # a symlink inside the folder to the victim's shard
        (folder / "shards" / "linked.parquet").symlink_to(victim)
        path = "shards/linked.parquet"
    m["shards"][0] = {**entry, "path": path}
    write_manifest(folder, m)
    return folder


@pytest.mark.parametrize("how", ["climb", "absolute", "symlink"])
def test_a_shard_path_out_of_its_folder_is_refused_before_it_is_read(world, tmp_path, how):
    from caption_debias.dataset import PreparedDataset

    folder = pointing_out(world, tmp_path, how)
    assert pq.read_table(folder / manifest_of(folder)["shards"][0]["path"]).num_rows == 4  # it does lead there
    with pytest.raises(UserError) as err:
        PreparedDataset.open(folder)
    line = str(err.value)
    assert "outside the folder" in line and "\n" not in line and str(folder) in line
    if how == "symlink":
        assert str(world / "victim") not in line  # the refusal does not say where the link leads


READERS = {
    "stats": lambda f, out: ["stats", f, "--out", str(out / "report"), "-q"],
    "curate": lambda f, out: ["curate", f, "--out", str(out / "curated"), "-q"],
    "pack": lambda f, out: ["pack", f, "--out", str(out / "packed"), "--image-root", str(out.parent), "-q"],
    "export-captions": lambda f, out: ["export-captions", f, "--out", str(out / "c.jsonl")],
    "view": lambda f, out: ["view", f, "--static", str(out / "snap.html")],
}


@pytest.mark.parametrize("command", list(READERS))
def test_every_reader_refuses_a_manifest_that_lists_another_folders_shard(world, tmp_path, command):
    folder = pointing_out(world, tmp_path, "climb")
    out = tmp_path / "out"
    out.mkdir()
    line = one_line_error(cli(*READERS[command](str(folder), out)))
    assert "lists a shard outside the folder" in line and "escapes the folder" in line
    written = [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")]
    assert not any(SECRET.encode() in p.read_bytes() for p in written), written


def test_a_packed_folder_that_lists_a_tar_outside_it_is_refused(world, tmp_path):
    from caption_debias.pack.folder import PackedFolder
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack

    pack(world / "victim", tmp_path / "victim-packed", PackOptions(image_root=str(world), quiet=True))
    pack(world / "mine", tmp_path / "mine-packed", PackOptions(image_root=str(world), quiet=True))
    assert len(PackedFolder(tmp_path / "mine-packed")) == 8
    m = manifest_of(tmp_path / "mine-packed")
    m["tars"][0] = {**manifest_of(tmp_path / "victim-packed")["tars"][0], "path": "../victim-packed/00000.tar"}
    write_manifest(tmp_path / "mine-packed", m)
    with pytest.raises(UserError, match="lists a tar outside the folder .tar path escapes the folder"):
        PackedFolder(tmp_path / "mine-packed")


# -- inputs inside, equal to or around what a command writes ---------------------------------


def digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def test_prepare_of_a_folders_own_manifest_with_overwrite_is_refused_and_deletes_nothing(world, tmp_path):
    folder = tmp_path / "p"
    shutil.copytree(world / "mine", folder)
    before = digests(folder)
    line = one_line_error(
        cli("prepare", str(folder / "manifest.json"), "--format", "table", "--out", str(folder), "--overwrite", "-q")
    )
    assert "the input is inside --out" in line and str(folder) in line
    assert digests(folder) == before


def _stage_runs(world: Path, tmp_path: Path):
    """(name, run(input, out)) of every command that reads a folder and writes a place."""
    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.export.captions import export_captions
    from caption_debias.export.urls import write_url_list
    from caption_debias.pack.options import PackOptions
    from caption_debias.pack.run import pack
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder
    from caption_debias.stats.compute import compute_stats
    from caption_debias.stats.report import write_report

    return {
        "prepare": lambda i, o: prepare([i], o, PrepareOptions(quiet=True, format="table", overwrite=True)),
        "curate": lambda i, o: curate([i], o, CurateOptions(quiet=True, overwrite=True)),
        "score": lambda i, o: score_folder([i], o, ScoreOptions(model="tiny", image_root=str(world), quiet=True)),
        "pack": lambda i, o: pack(i, o, PackOptions(image_root=str(world), quiet=True, overwrite=True)),
        "stats": lambda i, o: write_report(compute_stats([i]), o),
        "export-captions": lambda i, o: export_captions(i, o, overwrite=True),
        "urls": lambda i, o: write_url_list(i, o, overwrite=True),
    }


FILE_OUTPUTS = {"export-captions": ".jsonl", "urls": ".parquet"}  # the others write a folder


PLACES = {
    "same": "the input is also",
    "input inside out": "the input is inside",
    "out inside input": "is inside the input",
}


def _places(base: Path, place: str, suffix: str = "") -> tuple[Path, Path] | None:
    """(input, output) that overlap as `place` says; None where a file output cannot be the input folder."""
    if place == "out inside input":
        return base / "in", base / "in" / f"out{suffix}"
    if place == "input inside out":
        return base / f"out{suffix}" / "in", base / f"out{suffix}"
    return None if suffix else (base / "in", base / "in")


def _refused_untouched(world: Path, name: str, run, given: Path, out: Path, place: str, flag: str) -> None:
    """`run(given, out)` is refused in one line naming `flag` and the overlap, and the input is as it was."""
    shutil.copytree(world / "mine", given)
    before = digests(given)
    with pytest.raises(UserError) as err:
        run(given, out)
    line = str(err.value)
    assert "\n" not in line and flag in line, (name, line)
    assert PLACES[place] in line, (name, line)
    assert digests(given) == before, name


@pytest.mark.parametrize("place", list(PLACES))
def test_no_command_writes_where_its_input_lies(world, tmp_path, place):
    for name, run in _stage_runs(world, tmp_path).items():
        places = _places(tmp_path / name.replace("-", "_"), place, FILE_OUTPUTS.get(name, ""))
        if places is not None:
            _refused_untouched(world, name, run, *places, place, "--out")


def _reader_runs(world: Path):
    """(name, the flag that names its output, run(input, out)) of the commands that read a folder and
    write a place beside the stages: view's snapshot and a training run."""
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.loop import train
    from caption_debias.view.options import ViewOptions
    from caption_debias.view.server import run_view

    return {
        "view --static": ("--static", lambda i, o: run_view([str(i)], ViewOptions(static=str(o), quiet=True))),
        "train": (
            "--out",
            lambda i, o: train(TrainConfig(data=str(i), out=str(o), model="tiny", image_root=str(world), quiet=True)),
        ),
    }


@pytest.mark.parametrize("place", list(PLACES))
def test_view_static_and_train_write_nowhere_their_input_lies(world, tmp_path, place):
    for name, (flag, run) in _reader_runs(world).items():
        given, out = _places(tmp_path / name.replace(" --", "_"), place)
        _refused_untouched(world, name, run, given, out, place, flag)
        assert not (out / "index.html").exists() and not (out / "checkpoints").exists(), name


# -- a damaged Parquet page: the input file at fault, in one line ------------------------------


def damage(src: Path, dst: Path, column: str, shard: int = 1) -> Path:
    """A copy of SRC whose shard `shard` has the zstd frame of `column` broken, its manifest digest
    updated to match (so only decoding finds it: a copy damaged before its digest was taken)."""
    shutil.copytree(src, dst)
    path = dst / "shards" / f"part-{shard:05d}.parquet"
    rg = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema.split(".")[0] == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    at = data.find(bytes.fromhex("28b52ffd"), start, start + chunk.total_compressed_size)  # the zstd frame's magic
    assert at > 0
    data[at : at + 4] = b"\0\0\0\0"
    path.write_bytes(bytes(data))
    m = manifest_of(dst)
    m["shards"][shard]["sha256"] = hashlib.sha256(bytes(data)).hexdigest()
    write_manifest(dst, m)
    return path


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    import open_clip
    import torch

    from caption_debias.model.load import register_shipped_configs

    register_shipped_configs()
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    torch.save(open_clip.create_model("tiny").state_dict(), path)
    return path


DAMAGED = {  # command -> (column to damage, arguments)
    "stats": ("caption", lambda f, out, w, root: ["stats", f, "--out", str(out / "report"), "-q"]),
    "curate": ("caption", lambda f, out, w, root: ["curate", f, "--out", str(out / "c"), "-q"]),
    "pack": ("caption", lambda f, out, w, root: ["pack", f, "--out", str(out / "p"), "--image-root", root, "-q"]),
    "export-captions": ("caption", lambda f, out, w, root: ["export-captions", f, "--out", str(out / "c.jsonl")]),
    "urls": ("caption", lambda f, out, w, root: ["urls", f, "--out", str(out / "u.parquet")]),
    "view": ("caption", lambda f, out, w, root: ["view", f, "--static", str(out / "v.html")]),
    "score": (
        "sentence_tokens",
        lambda f, out, w, root: (
            ["score", f, "--out", str(out / "s"), "--model", "tiny", "--pretrained", w] + ["--image-root", root, "-q"]
        ),
    ),
    "eval": (
        "image",
        lambda f, out, w, root: (
            ["eval", "tiny", "--pretrained", w, "--data", f, "--image-root", root]
            + ["--out", str(out / "e.json"), "-q"]
        ),
    ),
    "train": (
        "sentence_tokens",
        lambda f, out, w, root: (
            ["train", f, "--out", str(out / "t"), "--model", "tiny", "--pretrained", w]
            + ["--image-root", root, "--epochs", "1", "--batch-size", "4", "--warmup-steps", "1", "-q"]
        ),
    ),
}


@pytest.mark.parametrize("command", list(DAMAGED))
def test_a_damaged_parquet_page_is_one_line_naming_the_input_shard(world, tmp_path, tiny_weights, command):
    column, args = DAMAGED[command]
    shard = damage(world / "mine", tmp_path / "damaged", column)
    out = tmp_path / "out"
    out.mkdir()
    line = one_line_error(cli(*args(str(tmp_path / "damaged"), out, str(tiny_weights), str(world))))
    assert f"{shard}: cannot read (ZSTD decompression failed" in line, line
    assert "partial" not in line and "cannot write" not in line


def test_a_read_failure_is_named_without_blaming_a_write():
    from caption_debias import storage

    with pytest.raises(storage.UnreadableFile, match="^x.parquet: cannot read"):
        with storage.reading(["x.parquet"]):
            raise OSError("ZSTD decompression failed")
    with pytest.raises(KeyError):  # not a read error: untouched
        with storage.reading(["x.parquet"]):
            raise KeyError("k")


# -- small ones ------------------------------------------------------------------------------


def test_pack_of_a_folder_without_a_manifest_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    line = one_line_error(cli("pack", str(tmp_path / "empty"), "--out", str(tmp_path / "p")))
    assert "not a prepared folder (no manifest.json" in line and "--image-root" not in line


@pytest.mark.parametrize("value", [True, False, float("nan"), float("inf")])
def test_a_boolean_or_non_finite_id_is_rejected_in_every_reader_with_ids(tmp_path, value):
    from caption_debias.readers import get_reader

    want = "id is not a string or number: bool" if isinstance(value, bool) else f"id is not a finite number: {value}"
    options = PrepareOptions(key_column="id")
    cases = {}
    sg = tmp_path / "s.json"
    sg.write_text(json.dumps([{**element(0, "A boat rests."), "id": value}, element(1, "A cat sits.")]))
    cases["sharegpt4v"] = sg
    table = tmp_path / "t.jsonl"
    table.write_text(
        json.dumps({"id": value, "image": "a.jpg", "caption": "A boat."})
        + "\n"
        + json.dumps({"id": "b", "image": "b.jpg", "caption": "A cat."})
        + "\n"
    )
    cases["table"] = table
    coco = tmp_path / "captions_val2017.json"
    coco.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "1.jpg"}],
                "annotations": [
                    {"id": value, "image_id": 1, "caption": "A cat."},
                    {"id": 2, "image_id": 1, "caption": "A pet."},
                ],
            }
        )
    )
    cases["coco"] = coco
    docci = tmp_path / "docci"
    docci.mkdir()
    (docci / "docci_descriptions.jsonlines").write_text(
        json.dumps({"example_id": value, "split": "train", "image_file": "a.jpg", "description": "A red door."})
        + "\n"
        + json.dumps({"example_id": "ok", "split": "train", "image_file": "b.jpg", "description": "A blue door."})
        + "\n"
    )
    cases["docci"] = docci
    for fmt, path in cases.items():
        items = list(get_reader(fmt)(path, str(path), options))
        rejects = [i.reason for i in items if isinstance(i, Reject)]
        records = [i for i in items if isinstance(i, Record)]
        assert rejects == [want], (fmt, rejects)
        assert len(records) == 1 and records[0].source_id not in ("True", "False", "nan", "inf"), fmt


def test_prepare_never_makes_a_key_of_a_boolean_id(tmp_path):
    from caption_debias.dataset import PreparedDataset

    src = tmp_path / "s.json"
    src.write_text(json.dumps([{**element(0, "A boat rests."), "id": True}, {**element(1, "A cat sits."), "id": 7}]))
    manifest = prepare([src], tmp_path / "out", PrepareOptions(quiet=True))
    keys = PreparedDataset.open(tmp_path / "out").read(["key"]).column("key").to_pylist()
    assert keys == ["sharegpt4v/7"] and manifest["counts"]["rejected"] == 1
