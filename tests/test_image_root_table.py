"""One image-root rule (issue 39, item 1): every consumer x every kind of root answers the same.

The rule lives in caption_debias/image_source/roots.py (given > recorded > lineage; a URL kept, a
relative or symlinked root made absolute and real where typed; trust.py on recorded roots; a gone
recorded root is one line, unless the folder carries its images). Each consumer is asked through
its own root step, on real prepared and curated folders: curate and pack (stage_root with their
options), score (open_inputs and its check), train (check_inputs, before any model), eval
(load_prepared), view (ViewData) and stats' Samples (which read through ViewData).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from caption_debias.errors import UserError
from caption_debias.image_source.roots import resolve_root

URL = "memory://roots-table/images"


def _edit(folder: Path, copy: Path, **options) -> Path:
    """A copy of `folder` whose manifest's options say `options` (None: the key removed)."""
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "manifest.json").read_text("utf-8"))
    for key, value in options.items():
        manifest["options"].pop(key, None)
        if isinstance(manifest.get("images"), dict):
            manifest["images"]["root"] = value
        if value is not None:
            manifest["options"][key] = value
    (copy / "manifest.json").write_text(json.dumps(manifest), "utf-8")
    return copy


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import fsspec
    from train_fixtures import make_prepared

    from caption_debias.curate.options import CurateOptions
    from caption_debias.curate.run import curate
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("roots")
    plain, images = make_prepared(root, n=6)  # records no root
    memory = fsspec.filesystem("memory")
    for file in images.iterdir():
        memory.pipe(f"{URL}/{file.name}", file.read_bytes())
    os.symlink(images, root / "linked")
    recorded = root / "recorded"
    prepare([root / "table.jsonl"], recorded, PrepareOptions(format="table", image_root=str(images), quiet=True))
    curated = root / "curated"
    curate([recorded], curated, CurateOptions(quiet=True))
    embedded = root / "embedded"
    curate([recorded], embedded, CurateOptions(embed_images=True, quiet=True))
    real = str(images.resolve())
    kinds = {  # kind: (folder, --image-root as typed, what every consumer answers)
        "relative": (plain, "images", real),
        "symlinked": (plain, str(root / "linked"), real),
        "url": (plain, URL, resolve_root(URL).resolved),
        "recorded": (recorded, None, real),
        "lineage only": (_edit(curated, root / "lineage", image_root=None), None, real),
        "bytes carried": (_edit(embedded, root / "carried", image_root=str(root / "moved")), None, None),
        "gone": (_edit(recorded, root / "gone", image_root=str(root / "moved")), None, "no such folder"),
        "untrusted recorded": (_edit(recorded, root / "untrusted", image_root="/"), None, "a filesystem root"),
    }
    return root, kinds


def _curate(folder, given, tmp):
    from caption_debias.curate.options import CurateOptions
    from caption_debias.image_source.stage import stage_root

    options, root = stage_root(CurateOptions(image_root=given, quiet=True), [folder])
    options.validate()  # the skeleton's check (runner.stage_run), with the root resolved
    return root


def _pack(folder, given, tmp):
    from caption_debias.image_source.stage import stage_root
    from caption_debias.pack.options import PackOptions

    options, root = stage_root(PackOptions(image_root=given, quiet=True), [folder])
    options.validate()  # the skeleton's check (runner.stage_run): pack requires a root
    return root


def _score(folder, given, tmp):
    from caption_debias.input_folders import open_inputs
    from caption_debias.score import run

    inputs = open_inputs(
        [folder], tmp / "scored", tokenizer_rule=run._clip_bpe_only, image_roots=True, image_root=given
    )
    run._check_image_roots(inputs)
    return next(iter(inputs.roots.values()), None)


def _train(folder, given, tmp):
    from caption_debias.train.config import TrainConfig
    from caption_debias.train.run_setup import check_inputs

    cfg = TrainConfig(data=str(folder), image_root=given, out=str(tmp / "run"), model="tiny")
    images, _ = check_inputs(cfg, tmp / "run", 1, 4, 0)
    return images.root


def _eval(folder, given, tmp):
    from caption_debias.evaluate.benchmarks import load_prepared

    data = load_prepared(folder, given)
    return data.source.source.root if data.source is not None else str(Path(data.images[0]).parent)


def _view(folder, given, tmp):
    from caption_debias.view.data import ViewData

    return ViewData([str(folder)], given).folders[0].image_root


def _stats(folder, given, tmp):
    """stats' Samples: the error line of a folder it cannot read, else whether its first card is a picture."""
    from caption_debias.stats.samples import collect

    (entry,) = collect([str(folder)], given, thumbs_dir=tmp / "thumbs")
    if "why" in entry:
        raise UserError(entry["why"])
    card = next(iter(entry["sources"].values()))[0]
    return "picture" if "data:image" in card["img"] else "placeholder"


CONSUMERS = {"curate": _curate, "pack": _pack, "score": _score, "train": _train, "eval": _eval, "view": _view}
NEEDS_A_ROOT = {"pack", "train", "eval"}  # they read no stored bytes: no root at all is their own one line


def _answer(consumer, folder, given, tmp) -> str | None:
    try:
        got = consumer(folder, given, tmp)
    except UserError as exc:
        return f"error: {exc}"
    return None if got is None else str(got)


@pytest.mark.parametrize(
    "kind", ["relative", "symlinked", "url", "recorded", "lineage only", "bytes carried", "gone", "untrusted recorded"]
)
def test_every_consumer_answers_the_same(world, kind, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    root, kinds = world
    folder, given, want = kinds[kind]
    monkeypatch.chdir(root)  # a relative root is typed here
    answers = {name: _answer(consumer, folder, given, tmp_path / name) for name, consumer in CONSUMERS.items()}
    if kind == "bytes carried":  # no root: the rows' stored bytes are the images
        assert {n: a for n, a in answers.items() if n not in NEEDS_A_ROOT} == {
            "curate": None,
            "score": None,
            "view": None,
        }
        for name in NEEDS_A_ROOT:
            assert answers[name].startswith("error: ") and "--image-root" in answers[name], answers
    elif want in ("no such folder", "a filesystem root"):
        assert len(set(answers.values())) == 1, answers  # the same line from every consumer
        line = answers["curate"]
        assert line.startswith("error: ") and want in line and "--image-root" in line and "\n" not in line, line
    else:
        assert answers == {name: want for name in CONSUMERS}, answers
    stats = _answer(_stats, folder, given, tmp_path / "stats")
    if want in ("no such folder", "a filesystem root"):
        assert stats == answers["view"], stats
    else:  # the pictures under the root, or the stored bytes
        assert stats == "picture", stats
