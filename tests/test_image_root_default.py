"""`prepare --image-root` is the image root curate, pack, train and eval use when given none:
recorded absolute in the manifest (even when given relative), carried through curate, and a
given --image-root wins."""

from __future__ import annotations

import json
import shutil

import pytest

from caption_debias.curate.options import CurateOptions
from caption_debias.curate.run import curate
from caption_debias.errors import UserError
from caption_debias.image_source.roots import inputs_root
from caption_debias.pack.options import PackOptions
from caption_debias.pack.run import pack
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from train_fixtures import make_prepared

    root = tmp_path_factory.mktemp("imageroot")
    _, images = make_prepared(root, n=8)
    prepared = root / "prepared-with-root"
    here = root / "elsewhere"
    here.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # a relative --image-root, recorded absolute
        prepare([root / "table.jsonl"], prepared, PrepareOptions(format="table", image_root="images", quiet=True))
    return root, prepared, images


def test_prepare_records_the_image_root_absolute(world):
    root, prepared, images = world
    here = root / "elsewhere"
    manifest = json.loads((prepared / "manifest.json").read_text())
    assert manifest["options"]["image_root"] == str(images.resolve())
    assert inputs_root([prepared]).resolved == str(images.resolve())
    assert inputs_root([prepared], str(here)).resolved == str(here.resolve())  # a given root wins


def test_curate_and_pack_use_it_when_given_none_and_a_given_root_wins(world, tmp_path):
    root, prepared, images = world
    curated = curate([prepared], tmp_path / "curated", CurateOptions(quiet=True))
    assert curated["options"]["image_root"] == str(images.resolve())
    coverage = curated["curation"]["image_coverage"]
    assert coverage is not None and sum(g["present"] for g in coverage.values()) == 8  # the images were read
    packed = pack(curated_folder := tmp_path / "curated", tmp_path / "packed", PackOptions(image_size=32, quiet=True))
    kept = curated["counts"]["written"]
    assert packed["counts"]["written"] == kept and packed["options"]["image_root"] == str(images.resolve())
    empty = tmp_path / "no-images"
    empty.mkdir()
    # every image missing stops a run unless --max-missing-images allows it (issue 29)
    options = PackOptions(image_root=str(empty), quiet=True, max_missing_images=1.0)
    other = pack(curated_folder, tmp_path / "packed-other", options)
    assert other["counts"]["removed_by_reason"] == {"image_missing": kept}  # the given root was used


def test_inputs_with_different_roots_need_one_given(world, tmp_path):
    root, prepared, images = world
    copy = tmp_path / "copy"
    shutil.copytree(images, copy)
    second = tmp_path / "second"
    prepare([root / "table.jsonl"], second, PrepareOptions(format="table", image_root=str(copy), quiet=True))
    with pytest.raises(UserError, match="different image roots"):
        curate([prepared, second], tmp_path / "both", CurateOptions(quiet=True))
    both = curate([prepared, second], tmp_path / "both", CurateOptions(image_root=str(images), quiet=True))
    assert both["counts"]["read"] == 16


def test_pack_without_a_root_anywhere_is_one_line(tmp_path):
    from train_fixtures import make_prepared

    prepared, _ = make_prepared(tmp_path, n=2)  # prepared without --image-root
    with pytest.raises(UserError, match="--image-root is required: the input's manifest records none"):
        pack(prepared, tmp_path / "packed", PackOptions(quiet=True))


def test_eval_and_train_use_it(world, tmp_path):
    pytest.importorskip("torch")
    from train_fixtures import tiny_config

    from caption_debias.evaluate.retrieval import as_data
    from caption_debias.train.loop import train

    root, prepared, images = world
    data = as_data(str(prepared))
    assert len(data.images) == 8 and all(p.is_relative_to(images.resolve()) for p in data.images)
    cfg = tiny_config(prepared, images, tmp_path / "run", max_steps=1, batch_size=4)
    cfg.image_root = None
    run = train(cfg)
    assert json.loads((run / "config.json").read_text())["config"]["image_root"] == str(images.resolve())
