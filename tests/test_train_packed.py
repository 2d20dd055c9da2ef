"""`train` on a packed folder: every recipe runs, the texts are the prepared folder's, resume is exact."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from train_fixtures import checkpoint, crash_at_step, make_prepared, metric_lines, tiny_config

from caption_debias.augment import DebiasOptions
from caption_debias.pack.options import PackOptions
from caption_debias.pack.run import pack
from caption_debias.train.config import TrainConfig


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("trainpacked")
    data, images = make_prepared(root, n=12, groups=3)
    out = root / "packed"
    pack(data, out, PackOptions(image_root=str(images), image_size=64, samples_per_shard=5, quiet=True))
    return data, images, out


def _cfg(data, out, **kw) -> TrainConfig:
    return tiny_config(data, None, out, **kw)


@pytest.mark.parametrize("recipe", ["debias", "longclip", "clip", "short"])
def test_every_recipe_trains_two_steps_on_the_tars(packed, tmp_path, recipe):
    from caption_debias.train.loop import train

    _, _, out = packed
    run = train(_cfg(out, tmp_path / recipe, recipe=recipe, max_steps=2, workers=1 if recipe == "clip" else 0))
    lines = metric_lines(run)
    assert [d["step"] for d in lines] == [1, 2] and all(np.isfinite(d["loss"]) for d in lines)
    assert lines[-1]["skipped_images"] == 0
    assert (lines[-1]["loss_short"] is None) == (recipe in ("clip", "short"))
    assert json.loads((run / "config.json").read_text())["resolved"]["train_rows"] == 12


def test_resume_on_tars_reproduces_the_uninterrupted_run(packed, tmp_path, monkeypatch):
    from caption_debias.train import loop

    _, _, out = packed
    straight = loop.train(_cfg(out, tmp_path / "a", max_steps=4))
    crash_at_step(monkeypatch, loop, 2, lambda: loop.train(_cfg(out, tmp_path / "b", max_steps=4)))
    resumed = loop.train(_cfg(out, tmp_path / "b", max_steps=4, resume="latest", workers=1))
    assert metric_lines(resumed) == metric_lines(straight)
    a, b = checkpoint(straight, 4), checkpoint(resumed, 4)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["counters"] == b["counters"] and a["counters"]["fallback"] > 0


def test_texts_equal_the_prepared_folders_for_every_recipe(packed):
    from open_clip.tokenizer import SimpleTokenizer

    from caption_debias.train.data import FolderImages, TrainSamples, load_rows
    from caption_debias.train.packed_source import load_packed

    data, images, out = packed
    folder_rows = load_rows(data, SimpleTokenizer(), group_key="group")
    packed_rows, packed_images = load_packed(str(out), SimpleTokenizer(), group_key="group")
    assert not packed_rows.retokenized and len(packed_rows) == len(folder_rows) == 12
    assert packed_rows.groups == folder_rows.groups and packed_rows.groups[0] == "g0"
    assert [packed_rows.keys[i] for i in range(12)] == folder_rows.keys
    for recipe in ("debias", "longclip", "clip", "short"):
        a, b = (
            TrainSamples(rows, src, None, recipe, 248, 7, DebiasOptions())
            for rows, src in ((folder_rows, FolderImages(images)), (packed_rows, packed_images))
        )
        for epoch in (0, 3):
            for row in range(12):
                x, y = a.text_only((epoch, row)), b.text_only((epoch, row))
                assert x.keys() == y.keys() and x["fallback"] == y["fallback"]
                for name in ("long", "short"):
                    if name in x:
                        assert np.array_equal(x[name], y[name]), (recipe, epoch, row, name)
    image = packed_images.open(packed_rows.keys[3], packed_rows.images[3])
    assert image.mode == "RGB" and min(image.size) == 64
    other = SimpleTokenizer(clean="canonicalize")  # another cleaning: ids are re-made from the sentences
    redone, _ = load_packed(str(out), other)
    sentences = json.loads(redone.folder.member(3, "json"))["sentences"]
    assert redone.retokenized and [s.tolist() for s in redone.tokens.sentences(3)] == [
        other.encode(s) for s in sentences
    ]


def test_split_selects_rows_and_an_empty_one_is_refused(packed):
    from caption_debias.errors import UserError
    from caption_debias.train.packed_source import load_packed

    _, _, out = packed
    with pytest.raises(UserError, match="no samples to train on in split 'val'"):
        load_packed(str(out), split="val")
