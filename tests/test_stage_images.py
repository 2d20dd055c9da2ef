"""curate, score and pack read images wherever they live (image_source): real img2dataset tars from
file:// URLs give the loose-file world's rows and signals, locally and with the root on moto's S3;
roots are resolved where typed and carried from stage to stage; a wrong root stops the run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from image_worlds import moto_s3, upload

from caption_debias.curate.options import CurateOptions
from caption_debias.curate.run import curate
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.pack.options import PackOptions
from caption_debias.pack.run import pack

FACTS = ["key", "image_width", "image_height", "image_sha256", "image_phash"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("open_clip")
    import open_clip
    import torch

    from caption_debias.model.load import register_shipped_configs

    register_shipped_configs()
    torch.manual_seed(1)
    weights = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    torch.save(open_clip.create_model("tiny").state_dict(), weights)
    return str(weights)


def _curate(inputs, out, **kw):
    return curate([str(i) for i in inputs], out, CurateOptions(quiet=True, **kw))


def _by_key(folder: Path, columns: list[str]) -> dict[str, dict]:
    """Rows by the picture's own key (the URL table's): img2dataset's rows carry it as caption_key,
    the loose world's rows are that key prepared again (`table/` in front)."""
    rows = PreparedDataset.open(folder).read([*columns, "meta"]).to_pylist()
    out = {}
    for r in rows:
        meta = json.loads(r.pop("meta") or "{}")
        key = r.pop("key")
        out[meta.get("caption_key") or key.removeprefix("table/")] = r
    return out


def _removed(folder: Path) -> list[dict]:
    path = folder / "removed.jsonl"
    return [json.loads(x) for x in path.read_text("utf-8").splitlines()] if path.exists() else []


def _score(inputs, out, weights, **kw):
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder

    return score_folder([str(i) for i in inputs], out, ScoreOptions(model="tiny", pretrained=weights, quiet=True, **kw))


# -- the same rows and signals from img2dataset's tars as from loose files ------------------------


def test_curate_of_img2dataset_tars_keeps_the_loose_worlds_rows_and_facts(wds, loose, tmp_path):
    from_tars = _curate([wds.prepared], tmp_path / "tars")  # the root prepare recorded: the tars' folder
    from_files = _curate([loose.prepared], tmp_path / "files")
    assert not [r for r in _removed(tmp_path / "tars") if r["reason"] == "image_missing"]
    assert from_tars["counts"]["written"] == from_files["counts"]["written"] == len(wds.refs)
    assert _by_key(tmp_path / "tars", FACTS) == _by_key(tmp_path / "files", FACTS)
    assert from_tars["images"] == {
        "root": str(wds.root.resolve()),
        "opened": True,
        "checked": len(wds.refs),
        "missing": 0,
        "unreadable": 0,
        "max_missing_images": 0.5,
    }


def test_score_of_img2dataset_tars_gives_the_loose_worlds_scores(wds, loose, tiny, tmp_path):
    tars = _score([wds.prepared], tmp_path / "tars", tiny)
    files = _score([loose.prepared], tmp_path / "files", tiny)
    assert tars["counts"]["removed"] == 0 and tars["scoring"]["reference"]["size"] == len(wds.refs)
    a = _by_key(tmp_path / "tars", ["key", "clip_score", "sentence_grounding"])
    b = _by_key(tmp_path / "files", ["key", "clip_score", "sentence_grounding"])
    assert a.keys() == b.keys()
    for key in a:
        assert a[key]["clip_score"] == pytest.approx(b[key]["clip_score"], abs=1e-5)
        assert np.allclose(a[key]["sentence_grounding"], b[key]["sentence_grounding"], atol=1e-3)
    assert files["images"]["root"] == str(loose.root.resolve()) and files["images"]["checked"] == len(wds.refs)


def test_score_then_curate_then_pack_need_no_second_image_root(wds, tiny, tmp_path):
    _score([wds.prepared], tmp_path / "scored", tiny)
    curated = _curate([tmp_path / "scored"], tmp_path / "curated")
    assert curated["images"]["root"] == str(wds.root.resolve()) and curated["images"]["missing"] == 0
    packed = pack(tmp_path / "curated", tmp_path / "packed", PackOptions(image_size=32, quiet=True))
    assert packed["counts"]["written"] == curated["counts"]["written"] and packed["counts"]["removed"] == 0
    assert packed["images"]["root"] == str(wds.root.resolve())


def test_pack_of_img2dataset_tars_and_of_loose_files_writes_the_same_pictures(wds, loose, tmp_path):
    options = PackOptions(image_size=32, samples_per_shard=5, quiet=True)
    pack(wds.prepared, tmp_path / "tars", options)
    pack(loose.prepared, tmp_path / "files", options)

    def jpgs(folder: Path) -> dict[str, bytes]:
        import tarfile

        out = {}
        for path in sorted(folder.glob("*.tar")):
            with tarfile.open(path) as tar:
                members = {m.name: m for m in tar.getmembers()}
                for name, info in members.items():
                    if name.endswith(".json"):
                        key = json.loads(tar.extractfile(info).read())["key"]
                        out[key] = tar.extractfile(members[name[:-5] + ".jpg"]).read()
        return out

    a, b = jpgs(tmp_path / "tars"), jpgs(tmp_path / "files")
    t = PreparedDataset.open(wds.prepared).read(["key", "meta"])
    caption_key = {
        k: json.loads(m)["caption_key"] for k, m in zip(t.column("key").to_pylist(), t.column("meta").to_pylist())
    }
    assert len(a) == len(b) == len(wds.refs)
    assert {caption_key[k]: v for k, v in a.items()} == {k.removeprefix("table/"): v for k, v in b.items()}


# -- roots: resolved where typed, carried, loud when wrong ----------------------------------------


def test_a_relative_root_typed_in_one_folder_works_from_another(loose, tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(loose.root.parent)
    curated = _curate([loose.prepared], tmp_path / "curated", image_root=loose.root.name)
    assert curated["options"]["image_root"] == str(loose.root.resolve())
    monkeypatch.chdir(tmp_path)
    scored = _score([tmp_path / "curated"], tmp_path / "scored", tiny)
    assert scored["counts"]["removed"] == 0 and scored["images"]["root"] == str(loose.root.resolve())


def test_a_wrong_root_stops_each_stage_naming_it(loose, tiny, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for run in (
        lambda: _curate([loose.prepared], tmp_path / "c", image_root=str(empty)),
        lambda: _score([loose.prepared], tmp_path / "s", tiny, image_root=str(empty)),
        lambda: pack(loose.prepared, tmp_path / "p", PackOptions(image_root=str(empty), quiet=True)),
    ):
        with pytest.raises(UserError) as err:
            run()
        line = str(err.value)
        assert "\n" not in line and str(empty) in line and "images not found" in line, line
        assert "--max-missing-images" in line and "tried " in line
    for out in ("c", "s", "p"):
        assert not (tmp_path / out / "manifest.json").exists()


def test_max_missing_images_is_the_share_that_stops_a_run(loose, tmp_path):
    root = tmp_path / "images"
    shutil.copytree(loose.root, root)
    gone = sorted(root.rglob("*.jpg"))[0]
    gone.unlink()
    ok = _curate([loose.prepared], tmp_path / "ok", image_root=str(root))
    assert ok["images"]["missing"] == 1 and ok["counts"]["removed_by_reason"]["image_missing"] == 1
    with pytest.raises(UserError, match=r"1 of 12 images not found .* more than --max-missing-images 0 allows"):
        _curate([loose.prepared], tmp_path / "strict", image_root=str(root), max_missing_images=0.0)


def test_a_recorded_root_that_is_gone_is_one_line_naming_it(loose, tmp_path):
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path / "copy"
    shutil.copytree(loose.root, root)
    table = tmp_path / "rows.jsonl"
    rows = [{"key": k, "image": v, "caption": "a picture of a thing."} for k, v in sorted(loose.refs.items())]
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([table], tmp_path / "prepared", PrepareOptions(format="table", image_root=str(root), quiet=True))
    shutil.rmtree(root)
    with pytest.raises(UserError, match=r"no such folder .*recorded in .*prepared's manifest; give --image-root"):
        _curate([tmp_path / "prepared"], tmp_path / "c")


def test_a_stage_without_an_image_root_says_so_and_its_manifest_too(urls, tmp_path, capsys):
    manifest = curate([str(urls.prepared)], tmp_path / "c", CurateOptions())
    assert "no --image-root given" in capsys.readouterr().err
    assert manifest["images"]["opened"] is False and manifest["images"]["root"] is None


def test_url_rows_are_found_in_img2dataset_output_under_the_root(urls, wds, loose, tiny, tmp_path):
    curated = _curate([urls.prepared], tmp_path / "c", image_root=str(wds.root))
    statuses = pq.read_table(tmp_path / "c" / ".curate" / "signals" / "part-00000.parquet").column("image_status")
    assert set(statuses.to_pylist()) == {0, 1}  # found, or the one URL img2dataset could not fetch
    assert curated["images"]["missing"] == len(wds.failed) == 1
    scored = _score([urls.prepared], tmp_path / "s", tiny, image_root=str(wds.root))
    assert scored["counts"]["removed"] == 1 and _removed(tmp_path / "s")[0]["key"] == wds.failed[0]


# -- the root on S3 (moto) --------------------------------------------------------------------------


def test_a_root_on_s3_gives_the_local_rows_and_signals(wds, tiny, tmp_path):
    local_c = _curate([wds.prepared], tmp_path / "local-c")
    local_s = _score([wds.prepared], tmp_path / "local-s", tiny)
    with moto_s3() as (server, fs, bucket):
        url = upload(fs, wds.root, f"s3://{bucket}/wds")
        remote_c = _curate([wds.prepared], tmp_path / "s3-c", image_root=url)
        remote_s = _score([wds.prepared], tmp_path / "s3-s", tiny, image_root=url)
        pack(wds.prepared, tmp_path / "s3-p", PackOptions(image_root=url, image_size=32, quiet=True))
    assert remote_c["images"]["root"] == url and remote_c["counts"] == local_c["counts"]
    assert _by_key(tmp_path / "s3-c", FACTS) == _by_key(tmp_path / "local-c", FACTS)
    cols = ["key", "clip_score", "sentence_grounding"]
    assert _by_key(tmp_path / "s3-s", cols) == _by_key(tmp_path / "local-s", cols)
    assert remote_s["counts"] == local_s["counts"]
    assert json.loads((tmp_path / "s3-p" / "manifest.json").read_text())["counts"]["written"] == len(wds.refs)


# -- the batched readers against their row-by-row references ----------------------------------------


def test_curate_facts_through_the_source_equal_the_per_file_reference(wds, loose):
    from caption_debias.curate import images
    from caption_debias.image_source import ImageSource

    keys = sorted(loose.refs)
    files = [loose.refs[k] for k in keys]
    reference = [images.image_facts(loose.root / f) for f in files]  # the one-file specification
    assert images.source_facts(ImageSource(str(loose.root), threads=3), files) == reference
    from_tars = images.source_facts(ImageSource(str(wds.root), threads=2), [wds.refs[k] for k in keys])
    assert from_tars == reference


def test_pack_resized_rows_equal_resized_one_row_at_a_time(wds):
    from caption_debias.pack.images import ImageReader

    reader = ImageReader(str(wds.root), PackOptions(image_size=32))
    refs = [*sorted(wds.refs.values()), "00000.tar#nope.jpg"]
    batched = list(reader.resized_rows(refs, [None] * len(refs)))
    for ref, got in zip(refs, batched):
        try:
            want = reader.resized(ref)
        except Exception as exc:  # noqa: BLE001  ImageFailed: compared by reason and detail
            want = exc
        assert repr(vars(got)) == repr(vars(want)), ref


def test_score_decoded_rows_equal_decode_image_one_row_at_a_time(wds):
    pytest.importorskip("open_clip")
    import torch
    from open_clip.transform import image_transform

    from caption_debias.image_source import ImageSource
    from caption_debias.score.encode import OK, decode_bytes, decode_image, decoded_rows

    preprocess = image_transform(32, is_train=False)
    refs = [*sorted(wds.refs.values()), "00001.tar#nope.jpg"]
    source = ImageSource(str(wds.root))
    stored = [None] * len(refs)
    stored[1] = source.read(refs[0])  # a row carrying image_bytes (curate --embed-images) among rows read by the source
    rows = list(decoded_rows(refs, stored, source, lambda d, n: decode_bytes(d, n, preprocess, 32), 2, 4))
    assert [i for i, _ in rows] == list(range(len(refs)))
    for (i, got), ref in zip(rows, refs):
        status, want, error = decode_image(ref, stored[i], source, preprocess, 32)
        if status == OK:
            assert torch.equal(got, want), ref
        else:
            assert got.detail == error, ref
