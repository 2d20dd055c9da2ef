"""--max-missing-images (caption_debias/options.py MissingImagesOptions; image_source/counts.py
check_missing) is an option of curate, score and pack like any other: a command-line flag, a --config
key and a Python API value, checked in the same words everywhere (a share in [0, 1]; NaN, None, a
negative or a word refused in one line)."""

from __future__ import annotations

import json
import random

import pytest
from cli_process import run_cli
from curate_fixtures import caption
from pictures import scene, write

import caption_debias as cd
from caption_debias.errors import UserError
from caption_debias.options import fields_of

STOPS = "more than --max-missing-images"


@pytest.fixture(scope="module")
def quarter_missing(tmp_path_factory):
    """A prepared folder of 4 rows whose first image is not there: a share of 0.25 missing."""
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root = tmp_path_factory.mktemp("quarter")
    images = root / "images"
    images.mkdir()
    rng = random.Random(3)
    rows = []
    for i in range(4):
        if i:
            write(scene(900 + i), images / f"m{i}.jpg", quality=90)
        rows.append({"key": f"m{i}", "image": f"m{i}.jpg", "caption": caption(rng)})
    table = root / "t.jsonl"
    table.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([table], root / "prepared", PrepareOptions(format="table", quiet=True, image_root=str(images)))
    return {"prepared": root / "prepared", "images": images}


def _curate_cli(world, out, *args: str):
    return run_cli(
        "curate", str(world["prepared"]), "--out", str(out), "--image-root", str(world["images"]), "-q", *args
    )


def test_the_flag_is_the_share_that_stops_curate(quarter_missing, tmp_path):
    stopped = _curate_cli(quarter_missing, tmp_path / "a", "--max-missing-images", "0.2")
    assert stopped.returncode == 2 and stopped.stderr.count("\n") == 1, stopped.stderr
    assert "1 of 4 images not found (25.0%)" in stopped.stderr and f"{STOPS} 0.2 allows" in stopped.stderr
    assert not (tmp_path / "a" / "manifest.json").exists()
    ran = _curate_cli(quarter_missing, tmp_path / "b", "--max-missing-images", "0.25")
    assert ran.returncode == 0, ran.stderr
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text("utf-8"))
    assert manifest["images"]["max_missing_images"] == 0.25 and manifest["images"]["missing"] == 1


@pytest.mark.parametrize("text", ["max-missing-images: 0.2\n", "max_missing_images: 0.2\n"])
def test_a_config_key_sets_it_and_a_flag_typed_wins(quarter_missing, tmp_path, text):
    config = tmp_path / "c.yaml"
    config.write_text(text, "utf-8")
    stopped = _curate_cli(quarter_missing, tmp_path / "a", "--config", str(config))
    assert stopped.returncode == 2 and f"{STOPS} 0.2 allows" in stopped.stderr, stopped.stderr
    ran = _curate_cli(quarter_missing, tmp_path / "b", "--config", str(config), "--max-missing-images", "1")
    assert ran.returncode == 0, ran.stderr


def test_the_api_value_sets_it(quarter_missing, tmp_path):
    with pytest.raises(UserError, match=f"{STOPS} 0 allows"):
        cd.pack(
            quarter_missing["prepared"], tmp_path / "p", image_root=str(quarter_missing["images"]), max_missing_images=0
        )
    result = cd.curate(
        quarter_missing["prepared"], tmp_path / "c", image_root=str(quarter_missing["images"]), max_missing_images=0.5
    )
    assert result.counts["removed_by_reason"]["image_missing"] == 1


@pytest.mark.parametrize(
    "value, message",
    [
        ("nan", "--max-missing-images must be a finite number (got nan)"),
        ("-0.1", "--max-missing-images must be in [0, 1] (got -0.1)"),
        ("1.5", "--max-missing-images must be in [0, 1] (got 1.5)"),
        ("half", "--max-missing-images must be a number (got 'half')"),
    ],
)
@pytest.mark.parametrize("command", ["curate", "pack", "score"])
def test_a_bad_value_on_the_command_line_is_one_line(quarter_missing, tmp_path, command, value, message):
    proc = run_cli(
        command, str(quarter_missing["prepared"]), "--out", str(tmp_path / "o"), "--max-missing-images", value
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().split("\n") == [f"caption-debias: error: {message}"]


@pytest.mark.parametrize("value", [None, float("nan"), -1, 2, "half", True])
@pytest.mark.parametrize(
    "cls",
    [
        "caption_debias.curate.options:CurateOptions",
        "caption_debias.pack.options:PackOptions",
        "caption_debias.score.options:ScoreOptions",
    ],
)
def test_a_bad_api_value_is_one_line_before_any_work(cls, value):
    import importlib

    module, name = cls.split(":")
    options_class = getattr(importlib.import_module(module), name)
    assert "max_missing_images" in fields_of(options_class)
    with pytest.raises(UserError, match=r"^--max-missing-images must be ") as err:
        options_class(max_missing_images=value).validate()
    assert "\n" not in str(err.value)


def test_none_is_refused_where_the_field_is_not_optional_and_passes_where_it_is():
    from caption_debias.curate.options import CurateOptions

    with pytest.raises(UserError, match=r"^--min-image-side must be a whole number \(got None\)$"):
        CurateOptions(min_image_side=None).validate()
    with pytest.raises(UserError, match=r"^--engine must be given a value \(got None\)$"):
        CurateOptions(engine=None).validate()
    assert CurateOptions(min_clip_score=None).validate().min_clip_score is None  # `float | None`: unset
