"""synth --plant: faults planted where the answer key says, from the seed alone; unplanted worlds unchanged."""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import pytest
from cli_process import run_cli
from PIL import Image

from caption_debias.errors import UserError
from caption_debias.synth import world
from caption_debias.synth.plant import PLANTED_FILE, PlantSpec

N, SEED, SPLIT = 60, 4, "test"


def _pixels(folder: Path, rel: str) -> bytes:
    with Image.open(folder / rel) as img:
        return img.tobytes()


def _content_digest(folder: Path) -> str:
    """The JSON's bytes and every image's decoded pixels (independent of the PNG encoder's version)."""
    h = hashlib.sha256((folder / "sharegpt4v.json").read_bytes())
    for path in sorted((folder / "images").glob("*.png")):
        h.update(path.name.encode())
        h.update(_pixels(folder, f"images/{path.name}"))
    return h.hexdigest()


def _records(folder: Path) -> list[dict]:
    return json.loads((folder / "sharegpt4v.json").read_text("utf-8"))


def _caption(record: dict) -> str:
    return record["conversations"][1]["value"]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    root = tmp_path_factory.mktemp("plant")
    world.write_world(root / "clean", N, SEED, split=SPLIT)
    info = world.write_world(root / "planted", N, SEED, split=SPLIT, plant=PlantSpec())
    key = json.loads((root / "planted" / PLANTED_FILE).read_text("utf-8"))
    return root, info, key


def test_unplanted_worlds_are_what_they_were():
    """Digests of worlds written by the code before planting existed (JSON bytes + decoded pixels)."""
    pinned = {
        (30, 7, "test", "objects"): "9d506c4b2d3c27ce5cbf726847f3fb98ca746f81d3a3ac10b6387008fe833cb0",
        (20, 3, "train", "layouts"): "3c9542334c9b900f1a7990b5c17794838e67b26c0765a919081389e4256025a3",
    }
    import tempfile

    for (n, seed, split, kind), digest in pinned.items():
        with tempfile.TemporaryDirectory() as tmp:
            info = world.write_world(Path(tmp), n, seed, split=split, world=kind)
            assert "planted" not in info and not (Path(tmp) / PLANTED_FILE).exists()
            assert _content_digest(Path(tmp)) == digest, (n, seed, split, kind)


def test_counts_disjoint_and_deterministic(worlds, tmp_path):
    root, info, key = worlds
    assert info["planted"] == {"hallucinated": 12, "mismatched": 3, "redrawn": 3}
    assert {kind: len(key[kind]) for kind in ("hallucinated", "mismatched", "redrawn")} == info["planted"]
    assert key["fractions"] == {"hallucinated": 0.2, "mismatched": 0.05, "redrawn": 0.05}
    rows = [e["row"] for kind in ("hallucinated", "mismatched", "redrawn") for e in key[kind]]
    sources = [e["copy_of"] for e in key["redrawn"]]
    assert len(set(rows)) == len(rows)
    ids = [f"synth-{SPLIT}-{SEED}-{r:06d}" for r in rows]
    assert not set(ids) & set(sources)  # a copy's source is a clean row
    for e in key["hallucinated"] + key["mismatched"] + key["redrawn"]:
        assert e["key"] == "sharegpt4v/" + e["id"]
    world.write_world(tmp_path / "again", N, SEED, split=SPLIT, plant=PlantSpec())
    assert (tmp_path / "again" / PLANTED_FILE).read_bytes() == (root / "planted" / PLANTED_FILE).read_bytes()
    assert _content_digest(tmp_path / "again") == _content_digest(root / "planted")
    world.write_world(tmp_path / "other", N, SEED + 1, split=SPLIT, plant=PlantSpec())
    other = json.loads((tmp_path / "other" / PLANTED_FILE).read_text("utf-8"))
    assert [e["row"] for e in other["hallucinated"]] != [e["row"] for e in key["hallucinated"]]


def test_unplanted_rows_are_untouched(worlds):
    root, _, key = worlds
    clean, planted = _records(root / "clean"), _records(root / "planted")
    touched = {e["row"] for kind in ("hallucinated", "mismatched", "redrawn") for e in key[kind]}
    assert len(clean) == len(planted) == N
    for i, (a, b) in enumerate(zip(clean, planted)):
        if i in touched:
            assert _caption(a) != _caption(b)
        else:
            assert a == b
            assert _pixels(root / "clean", a["image"]) == _pixels(root / "planted", b["image"])


def test_hallucinated_sentence_names_only_absent_objects(worlds):
    root, _, key = worlds
    scenes = world.sample_world(N, SEED, split=SPLIT)
    clean, planted = _records(root / "clean"), _records(root / "planted")
    by_id = {r["id"]: i for i, r in enumerate(clean)}
    names = [f"{c} {s}" for c, s in itertools.product(world.COLOURS, world.SHAPES)]
    for e in key["hallucinated"]:
        row = e["row"]
        sentences = world.caption_sentences(scenes[row], _text_rng_at(scenes, row))
        assert sentences[e["sentence"]] == e["replaced"] and _caption(clean[row]) == " ".join(sentences)
        assert 1 <= e["sentence"] <= len(scenes[row].objects)  # a detail sentence, never the summary
        swapped = list(sentences)
        swapped[e["sentence"]] = e["text"]
        assert _caption(planted[row]) == " ".join(swapped)
        donor = by_id[e["donor"]]
        assert e["text"] in _caption(clean[donor]) and scenes[donor].group != scenes[row].group
        said = {name for name in names if name in e["text"]}
        assert len(said) == 2 and not said & {o.name for o in scenes[row].objects}


def _text_rng_at(scenes, row):
    """The captions' random stream advanced to `row` (the world draws captions in row order)."""
    import random

    rng = random.Random(f"captions:{SPLIT}:{SEED}")
    for scene in scenes[:row]:
        world.caption_sentences(scene, rng)
    return rng


def test_mismatched_rows_trade_captions_across_groups(worlds):
    root, _, key = worlds
    clean, planted = _records(root / "clean"), _records(root / "planted")
    by_id = {r["id"]: i for i, r in enumerate(clean)}
    givers = []
    for e in key["mismatched"]:
        giver = by_id[e["caption_of"]]
        givers.append(giver)
        assert _caption(planted[e["row"]]) == _caption(clean[giver])
        assert clean[giver]["group"] != clean[e["row"]]["group"]
    assert sorted(givers) == sorted(e["row"] for e in key["mismatched"])  # a cycle: no caption twice
    captions = [_caption(r) for r in planted]
    assert len(set(captions)) == len(captions)


def test_redrawn_rows_are_the_same_scene_in_other_pixels(worlds):
    root, _, key = worlds
    planted = _records(root / "planted")
    by_id = {r["id"]: i for i, r in enumerate(planted)}
    scenes = world.sample_world(N, SEED, split=SPLIT)
    for e in key["redrawn"]:
        copy, source = planted[e["row"]], planted[by_id[e["copy_of"]]]
        assert by_id[e["copy_of"]] < e["row"]  # the earlier row is the one a deduplicator keeps
        assert copy["group"] == source["group"]
        a, b = _pixels(root / "planted", copy["image"]), _pixels(root / "planted", source["image"])
        assert a != b
        with Image.open(root / "planted" / copy["image"]) as x, Image.open(root / "planted" / source["image"]) as y:
            assert {c for _, c in x.getcolors(4096)} == {c for _, c in y.getcolors(4096)}  # same objects
        assert _caption(copy) != _caption(source)
        for obj in scenes[by_id[e["copy_of"]]].objects:
            assert obj.name in _caption(copy)


def test_prepare_keeps_the_keys_and_sentence_indices(worlds, tmp_path):
    from caption_debias.dataset import PreparedDataset
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    root, _, key = worlds
    options = PrepareOptions(format="sharegpt4v", image_root=str(root / "planted"), split=SPLIT, quiet=True)
    prepare([root / "planted" / "sharegpt4v.json"], tmp_path / "prep", options)
    table = PreparedDataset.open(tmp_path / "prep").read(["key", "sentences"])
    sentences = dict(zip(table.column("key").to_pylist(), table.column("sentences").to_pylist()))
    assert len(sentences) == N
    for e in key["hallucinated"]:
        assert sentences[e["key"]][e["sentence"]] == e["text"]
    for e in key["mismatched"] + key["redrawn"]:
        assert e["key"] in sentences
    assert all(e["copy_of_key"] in sentences for e in key["redrawn"])


def test_bad_fractions_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="fraction"):
        world.write_world(tmp_path / "a", 20, 0, plant=PlantSpec(hallucinated=1.5))
    with pytest.raises(UserError, match="too few clean rows"):
        world.write_world(tmp_path / "b", 20, 0, plant=PlantSpec(hallucinated=0.5, redrawn=0.3))
    assert PlantSpec().counts(20) == {"hallucinated": 4, "mismatched": 2, "redrawn": 1}  # one mismatch has no partner


def test_cli_plant_and_overwrite_without_it(tmp_path):
    exe = ["synth", "--out", str(tmp_path / "w"), "--n", "20"]
    ok = run_cli(*exe, "--plant", "--plant-redrawn", "0.1")
    assert ok.returncode == 0, ok.stderr
    assert "planted 4 hallucinated, 2 mismatched, 2 redrawn" in ok.stdout
    assert len(json.loads((tmp_path / "w" / PLANTED_FILE).read_text("utf-8"))["redrawn"]) == 2
    bad = run_cli(*exe, "--overwrite", "--plant-mismatched", "0.1")
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "--plant" in bad.stderr
    again = run_cli(*exe, "--overwrite")
    assert again.returncode == 0 and not (tmp_path / "w" / PLANTED_FILE).exists()  # no stale key


@pytest.mark.parametrize("n", [48, 60, 64])
def test_small_worlds_plant_mismatched_captions_across_groups(n, tmp_path):
    # the rows first drawn to trade captions were all of one group at these sizes (seed 0, split train)
    world.write_world(tmp_path, n, 0, plant=PlantSpec())
    key = json.loads((tmp_path / PLANTED_FILE).read_text("utf-8"))
    records = _records(tmp_path)
    by_id = {r["id"]: i for i, r in enumerate(records)}
    rows = [e["row"] for e in key["mismatched"]]
    assert len(rows) == max(2, round(0.05 * n))
    assert sorted(by_id[e["caption_of"]] for e in key["mismatched"]) == sorted(rows)  # a cycle
    group_of = {i: r["group"] for i, r in enumerate(records)}
    assert all(group_of[e["row"]] != group_of[by_id[e["caption_of"]]] for e in key["mismatched"])


def test_mismatched_rows_of_one_group_are_traded_or_refused():
    from caption_debias.synth.plant import _across_groups, _interleaved_cycle

    groups = ["a"] * 6 + ["b", "c", "d", "d"]
    assert _across_groups([0, 1, 2], [3, 6, 7], groups) == [0, 7, 6]
    assert _across_groups([0, 6], [1, 7], groups) == [0, 6]  # already mixed: as drawn
    with pytest.raises(UserError, match="too few rows outside one group"):
        _across_groups([0, 1], [2, 3], groups)
    for rows in ([0, 1, 6, 7], [0, 6, 7], [0, 1, 6, 7, 8, 9]):
        cycle = _interleaved_cycle(rows, groups)
        assert sorted(a for a, _ in cycle) == sorted(rows) == sorted(b for _, b in cycle)
        assert all(groups[a] != groups[b] for a, b in cycle)


def test_curate_faults_are_each_removed_by_their_rule_and_no_clean_row_is(tmp_path):
    """synth --plant --plant-curate-faults: a first curate on the world removes every planted curate
    fault for the reason it was planted for, and no row the key does not list; the other rows are the
    plain planted world's."""
    import caption_debias as cd
    from caption_debias.synth.plant import CURATE_KINDS

    world.write_world(tmp_path / "eval", 40, 0, image_size=32, split="test")
    res = run_cli(
        "synth", "--out", str(tmp_path / "w"), "--n", "160", "--seed", "2", "--plant", "--plant-curate-faults",
        "--plant-eval-leaks", str(tmp_path / "eval"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    key = json.loads((tmp_path / "w" / PLANTED_FILE).read_text("utf-8"))
    assert all(key[kind] for kind in CURATE_KINDS), {k: len(key[k]) for k in CURATE_KINDS}
    assert [e["copied"] for e in key["eval_leak"]] == ["both", "image", "caption"]
    cd.prepare(tmp_path / "w" / "sharegpt4v.json", tmp_path / "p", format="sharegpt4v", image_root=str(tmp_path / "w"))
    cd.curate(tmp_path / "p", tmp_path / "c", decontaminate=[f"sharegpt4v-1k={tmp_path / 'eval' / 'sharegpt4v.json'}"])
    removed, details = {}, {}
    for line in (tmp_path / "c" / "removed.jsonl").read_text("utf-8").splitlines():
        entry = json.loads(line)
        removed[entry["key"]] = entry["reason"]
        details[entry["key"]] = entry.get("detail")
    reasons = {
        "duplicate_image": "duplicate_image",
        "reencoded": "duplicate_image",
        "duplicate_caption": "duplicate_caption",
        "near_duplicate_caption": "near_duplicate_caption",
        "repetition_loop": "repetitive_caption",
        "cut_off": "truncated_caption",
        "broken_image": "image_unreadable",
        "tiny_image": "image_too_small",
        "missing_image": "image_missing",
    }
    for kind in CURATE_KINDS:
        for entry in key[kind]:
            assert removed.get(entry["key"]) == reasons[kind], (kind, entry)
            if "copy_of_key" in entry:
                assert entry["copy_of_key"] not in removed  # the earlier row stays
    for entry in key["eval_leak"]:  # found by what was copied: the picture's bytes, else the caption
        assert removed.get(entry["key"]) == "eval_overlap", entry
        assert details[entry["key"]]["by"] == ("caption text" if entry["copied"] == "caption" else "image sha256")
    planted = {e["key"] for kind in (*CURATE_KINDS, "eval_leak") for e in key[kind]}
    assert set(removed) == planted
    # the rows no curate kind or leak touched are the plain planted world's, byte for byte
    world.write_world(tmp_path / "plain", 160, 2, plant=PlantSpec())
    plain, more = _records(tmp_path / "plain"), _records(tmp_path / "w")
    rows = {e["row"] for kind in (*CURATE_KINDS, "eval_leak") for e in key[kind]}
    assert all(a == b for i, (a, b) in enumerate(zip(plain, more)) if i not in rows)
    text_rows = {
        e["row"]
        for kind in ("duplicate_caption", "near_duplicate_caption", "repetition_loop", "cut_off")
        for e in key[kind]
    }
    assert all(_caption(plain[i]) != _caption(more[i]) for i in text_rows)
    assert all(more[e["row"]]["image"].endswith(".jpg") for e in key["reencoded"])


def test_eval_leaks_leave_the_other_kinds_and_their_key_as_they_were(tmp_path):
    """--plant-eval-leaks adds rows copied from an evaluation world; every other row, picture and key
    entry is the world's without leaks, byte for byte; the copies are the eval rows' own."""
    world.write_world(tmp_path / "eval", 30, 1, image_size=32, split="heldout")
    world.write_world(tmp_path / "plain", N, SEED, split=SPLIT, plant=PlantSpec.dump())
    world.write_world(tmp_path / "leaky", N, SEED, split=SPLIT, plant=PlantSpec.dump(), leak_from=tmp_path / "eval")
    plain_key = json.loads((tmp_path / "plain" / PLANTED_FILE).read_text("utf-8"))
    key = json.loads((tmp_path / "leaky" / PLANTED_FILE).read_text("utf-8"))
    leaks = key.pop("eval_leak")
    assert key.pop("eval_world") == {"path": str(tmp_path / "eval"), "rows": 30}
    assert json.dumps(key, indent=1) == json.dumps(plain_key, indent=1)
    assert len(leaks) == 3 and {e["copied"] for e in leaks} == {"both", "image", "caption"}
    plain, leaky, evals = _records(tmp_path / "plain"), _records(tmp_path / "leaky"), _records(tmp_path / "eval")
    by_id = {r["id"]: r for r in evals}
    rows = {e["row"] for e in leaks}
    for i, (a, b) in enumerate(zip(plain, leaky)):
        if i not in rows:
            assert a == b
            if (tmp_path / "plain" / a["image"]).is_file():
                assert (tmp_path / "plain" / a["image"]).read_bytes() == (tmp_path / "leaky" / b["image"]).read_bytes()
    for e in leaks:
        mine, theirs = leaky[e["row"]], by_id[e["eval_id"]]
        assert (_caption(mine) == _caption(theirs)) == (e["copied"] != "image")
        assert (mine["image"] == theirs["image"] == e["eval_image"]) == (e["copied"] != "caption")
        if e["copied"] != "caption":
            assert (tmp_path / "leaky" / mine["image"]).read_bytes() == (
                tmp_path / "eval" / theirs["image"]
            ).read_bytes()
    with pytest.raises(UserError, match="another --split"):
        world.write_world(tmp_path / "same", N, SEED, split="heldout", plant=PlantSpec(), leak_from=tmp_path / "eval")
    with pytest.raises(UserError, match="goes with --plant"):
        world.write_world(tmp_path / "none", N, SEED, split=SPLIT, leak_from=tmp_path / "eval")
    with pytest.raises(UserError, match="no sharegpt4v.json"):
        world.write_world(tmp_path / "none", N, SEED, split=SPLIT, plant=PlantSpec(), leak_from=tmp_path / "nowhere")
