"""The synthetic world: determinism, caption structure, and the summary-vs-detail design."""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from pathlib import Path

import pytest
from cli_process import run_cli
from PIL import Image

from caption_debias.errors import UserError
from caption_debias.locking import LOCK_FILES
from caption_debias.synth import world


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name not in LOCK_FILES:  # the lock's holder (pid, time) is no output
            h.update(path.relative_to(folder).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _captions(folder: Path) -> list[dict]:
    return json.loads((folder / "sharegpt4v.json").read_text("utf-8"))


def test_same_seed_same_bytes_other_seed_other_world(tmp_path):
    a = world.write_world(tmp_path / "a", 24, seed=7)
    world.write_world(tmp_path / "b", 24, seed=7)
    world.write_world(tmp_path / "c", 24, seed=8)
    assert a["images"] == 24 and a["groups"] == 6
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_sharegpt4v_layout_and_images(tmp_path):
    world.write_world(tmp_path, 9, seed=1, image_size=48, split="test", group_size=4)
    records = _captions(tmp_path)
    assert len(records) == 9
    assert len({r["id"] for r in records}) == 9
    groups = [r["group"] for r in records]
    assert [groups.count(g) for g in dict.fromkeys(groups)] == [4, 4, 1]  # last group is cut short
    for r in records:
        assert not Path(r["image"]).is_absolute()
        with Image.open(tmp_path / r["image"]) as img:
            assert img.size == (48, 48) and img.mode == "RGB"
            assert len(img.getcolors(maxcolors=4096)) > 2  # background plus drawn shapes
        turns = r["conversations"]
        assert turns[0]["from"] == "human" and turns[1]["from"] == "gpt"
        assert r["split"] == "test"


def test_caption_structure_follows_the_scene():
    rng = random.Random(0)
    closings = 0
    for g in range(60):
        for scene in world.sample_group(rng, f"g{g}", 3):
            sentences = world.caption_sentences(scene, rng)
            k = len(scene.objects)
            assert world.MIN_OBJECTS <= k <= world.MAX_OBJECTS
            assert len(sentences) in (k + 1, k + 2)
            summary, details = sentences[0], sentences[1 : k + 1]
            # The summary names every object coarsely and the background, but no layout.
            for obj in scene.objects:
                assert obj.name in summary
            assert scene.background in summary
            assert not any(cell in summary for cell in world.CELL_NAMES.values())
            assert not any(size in summary for size in world.SIZES)
            # One detail sentence per object, with its size and cell.
            for obj in scene.objects:
                mine = [d for d in details if f"{obj.size} {obj.name}" in d or f"The {obj.name}" in d]
                assert any(world.CELL_NAMES[obj.cell] in d and obj.size in d for d in mine), (obj, details)
            if len(sentences) == k + 2:
                closings += 1
                assert sentences[-1].startswith("Overall, ")
            assert all(s.endswith(".") and ". " not in s for s in sentences)
    assert 0 < closings < 180


def test_relation_words():
    assert world.relation((0, 0), (1, 1)) == "above and to the left of"
    assert world.relation((1, 2), (1, 0)) == "to the right of"
    assert world.relation((2, 1), (0, 1)) == "below"


def test_summary_separates_random_pairs_but_not_hard_negatives():
    """layouts world: what the summary says (objects + background) vs what the details say (layout)."""
    scenes = world.sample_world(400, seed=3, group_size=4, split="test", world="layouts")

    def summary_content(s):
        return (s.background, frozenset(o.name for o in s.objects))

    def detail_content(s):
        return frozenset((o.name, o.size, o.cell) for o in s.objects)

    cross = [(a, b) for a, b in itertools.combinations(scenes, 2) if a.group != b.group]
    inside = [(a, b) for a, b in itertools.combinations(scenes, 2) if a.group == b.group]
    separated = sum(summary_content(a) != summary_content(b) for a, b in cross) / len(cross)
    assert separated > 0.99
    assert all(summary_content(a) == summary_content(b) for a, b in inside)
    # Only the detail sentences tell the group members apart, and they always do.
    assert all(detail_content(a) != detail_content(b) for a, b in inside)


def test_objects_world_members_differ_in_what_only_details_name():
    """objects world: the summary (background, count, the large salient object) separates random
    pairs but is shared inside a group; members differ in which colours appear besides the
    salient one, and those colours and shapes are named in detail sentences only."""
    scenes = world.sample_world(400, seed=3, group_size=4, split="test", world="objects")
    rng = random.Random(1)

    def summary_content(s):
        return (s.background, len(s.objects), s.salient.name)

    def other_colours(s):
        return frozenset(o.colour for o in s.objects[1:])

    cross = [(a, b) for a, b in itertools.combinations(scenes, 2) if a.group != b.group]
    inside = [(a, b) for a, b in itertools.combinations(scenes, 2) if a.group == b.group]
    assert sum(summary_content(a) != summary_content(b) for a, b in cross) / len(cross) > 0.99
    assert all(summary_content(a) == summary_content(b) for a, b in inside)
    assert all(other_colours(a) != other_colours(b) for a, b in inside)
    for scene in scenes:
        assert scene.salient.size == "large" and all(o.size != "large" for o in scene.objects[1:])
        assert len({o.colour for o in scene.objects}) == len(scene.objects)  # "the red X" is one object
        sentences = world.caption_sentences(scene, rng)
        summary, details = sentences[0], " ".join(sentences[1:])
        assert scene.background in summary and scene.salient.name in summary
        assert world.NUMBER_WORDS[len(scene.objects)] in summary
        for obj in scene.objects[1:]:
            assert obj.colour not in summary and obj.name in details
        assert 4 <= len(sentences) <= 7 and all(s.endswith(".") and ". " not in s for s in sentences)


def test_objects_world_group_size_limit(tmp_path):
    assert len(world.sample_world(30, seed=0, group_size=15)) == 30
    with pytest.raises(UserError, match="1..15"):
        world.sample_world(30, seed=0, group_size=16)
    with pytest.raises(UserError, match="--world"):
        world.sample_world(4, seed=0, world="nope")


def test_bad_arguments_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="--n"):
        world.write_world(tmp_path, 0, seed=0)
    with pytest.raises(UserError, match="image-size"):
        world.write_world(tmp_path, 4, seed=0, image_size=4)
    world.write_world(tmp_path, 2, seed=0)
    with pytest.raises(UserError, match="already exists"):
        world.write_world(tmp_path, 2, seed=0)


def test_cli_writes_and_reports_one_line_errors(tmp_path):
    ok = run_cli("synth", "--out", str(tmp_path), "--n", "5", "--seed", "2")
    assert ok.returncode == 0, ok.stderr
    assert "wrote 5 images" in ok.stdout
    assert len(_captions(tmp_path)) == 5
    bad = run_cli("synth", "--out", str(tmp_path), "--n", "5")
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0 and "already exists" in bad.stderr


def test_synth_options_write_what_write_world_writes(tmp_path):
    from caption_debias.synth.options import SynthOptions
    from caption_debias.synth.plant import PlantSpec
    from caption_debias.synth.world import run_synth, write_world

    write_world(tmp_path / "a", 6, 3, image_size=32, group_size=2)
    run_synth(tmp_path / "b", SynthOptions(n=6, seed=3, image_size=32, group_size=2))
    assert (tmp_path / "a" / "sharegpt4v.json").read_bytes() == (tmp_path / "b" / "sharegpt4v.json").read_bytes()
    assert SynthOptions(n=4, plant=True, plant_redrawn=0.25).plant_spec() == PlantSpec(redrawn=0.25)
    assert SynthOptions(n=4).plant_spec() is None
    with pytest.raises(UserError, match="--plant-mismatched goes with --plant"):
        SynthOptions(n=4, plant_mismatched=0.1).validate()
