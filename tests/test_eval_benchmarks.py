"""Benchmark readers on tiny fixture layouts written in each data set's public format."""

import json
from pathlib import Path

import pytest
from pictures import picture, write

from caption_debias.errors import UserError
from caption_debias.evaluate.benchmarks import load_benchmark


def _img(path: Path) -> None:
    write(picture((8, 8), (10, 20, 30)), path)


def test_urban1k_orders_numerically_and_pairs_by_stem(tmp_path):
    root = tmp_path / "Urban1k"
    for i in (1, 2, 10):
        _img(root / "image" / f"{i}.jpg")
        (root / "caption").mkdir(exist_ok=True)
        (root / "caption" / f"{i}.txt").write_text(f"Scene {i} is a street. A bus waits.\n", "utf-8")
    data = load_benchmark("urban1k", tmp_path)  # parent folder of Urban1k/ works too
    assert [p.name for p in data.images] == ["1.jpg", "2.jpg", "10.jpg"]
    assert data.captions[2] == ["Scene 10 is a street.", "A bus waits."]
    assert data.text_image == [0, 1, 2]
    data.check_images()


def test_docci_reads_only_the_test_split(tmp_path):
    rows = [
        {
            "example_id": f"{s}_{i:05d}",
            "split": s,
            "image_file": f"{s}_{i:05d}.jpg",
            "description": f"A {s} photo {i}. It has details.",
        }
        for s in ("train", "test")
        for i in range(3)
    ]
    (tmp_path / "docci_descriptions.jsonlines").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    data = load_benchmark("docci", tmp_path)
    assert [p.name for p in data.images] == ["test_00000.jpg", "test_00001.jpg", "test_00002.jpg"]
    assert all(p.parent == tmp_path / "images" for p in data.images)
    assert data.captions[1] == ["A test photo 1.", "It has details."]


def _dci(tmp_path: Path) -> Path:
    root = tmp_path / "densely_captioned_images"
    (root / "annotations").mkdir(parents=True)
    names = {"train": ["a-data.json", "b-data.json"], "valid": ["c-data.json"], "test": []}
    extras = {"a": "The left side has a tree. A dog sleeps.", "b": "", "c": "Clouds cover the sky."}
    for key, extra in extras.items():
        ann = {
            "image": f"sa_{key}.jpg",
            "short_caption": f"Photo {key} outdoors.",
            "extra_caption": extra,
            "mask_data": {},
            "mask_keys": [],
        }
        (root / "annotations" / f"{key}-data.json").write_text(json.dumps(ann), "utf-8")
    (root / "splits.json").write_text(json.dumps(names), "utf-8")
    return root


def test_dci_uses_every_split_and_short_plus_extra_caption(tmp_path):
    data = load_benchmark("dci", _dci(tmp_path))
    assert [p.name for p in data.images] == ["sa_a.jpg", "sa_b.jpg", "sa_c.jpg"]
    assert data.captions[0] == ["Photo a outdoors.", "The left side has a tree.", "A dog sleeps."]
    assert data.captions[1] == ["Photo b outdoors."]


def test_long_dci_keeps_extra_caption_only_and_skips_empty(tmp_path):
    data = load_benchmark("long-dci", _dci(tmp_path))
    assert [p.name for p in data.images] == ["sa_a.jpg", "sa_c.jpg"]
    assert data.captions[0] == ["The left side has a tree.", "A dog sleeps."]
    assert data.info["skipped_empty"] == 1


def test_coco_groups_all_captions_of_an_image(tmp_path):
    doc = {
        "images": [{"id": 7, "file_name": "000007.jpg"}, {"id": 3, "file_name": "000003.jpg"}],
        "annotations": [
            {"id": 1, "image_id": 7, "caption": "A dog. "},
            {"id": 2, "image_id": 3, "caption": "A cat."},
            {"id": 3, "image_id": 7, "caption": "A brown dog."},
        ],
    }
    (tmp_path / "annotations").mkdir()
    (tmp_path / "annotations" / "captions_val2017.json").write_text(json.dumps(doc), "utf-8")
    (tmp_path / "val2017").mkdir()
    data = load_benchmark("coco", tmp_path)
    assert [p.name for p in data.images] == ["000003.jpg", "000007.jpg"]
    assert data.captions == [["A dog."], ["A cat."], ["A brown dog."]]
    assert data.text_image == [1, 0, 1]


def test_flickr30k_karpathy_test_split_and_full_set(tmp_path):
    doc = {
        "images": [
            {
                "filename": f"{i}.jpg",
                "split": "test" if i < 2 else "train",
                "sentences": [{"raw": f"Person {i} runs ."}, {"raw": f"Someone {i} jogs ."}],
            }
            for i in range(4)
        ]
    }
    (tmp_path / "dataset_flickr30k.json").write_text(json.dumps(doc), "utf-8")
    test = load_benchmark("flickr30k", tmp_path)
    assert test.n_images == 2 and len(test.captions) == 4 and test.text_image == [0, 0, 1, 1]
    assert load_benchmark("flickr30k-full", tmp_path / "dataset_flickr30k.json").n_images == 4


def test_sharegpt4v_1k_both_definitions(tmp_path):
    els = []
    for i in range(1200):
        image = f"sam/images/sa_{i}.jpg" if i % 2 else f"coco/train2017/{i:012d}.jpg"
        els.append(
            {
                "id": str(i),
                "image": image,
                "conversations": [
                    {"from": "human", "value": "<image>\nDescribe."},
                    {"from": "gpt", "value": f"Image {i}.\n\nMore about {i}."},
                ],
            }
        )
    path = tmp_path / "share-captioner_coco_lcs_sam_1246k_1107.json"
    path.write_text(json.dumps(els), "utf-8")
    first = load_benchmark("sharegpt4v-1k", path)
    assert first.n_images == 1000 and first.images[-1].name == "sa_999.jpg"
    assert first.captions[0] == ["Image 0.", "More about 0."]
    sam = load_benchmark("sharegpt4v-1k-sam", tmp_path)
    assert sam.n_images == 600  # only 600 SAM records exist in this fixture
    assert all("sam/images" in str(p) for p in sam.images)
    assert "SAM" in sam.definition and "first 1,000 records" in first.definition


def test_bad_inputs_give_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_benchmark("docci", tmp_path / "missing")
    with pytest.raises(UserError, match="unknown benchmark"):
        load_benchmark("imagenet", tmp_path)
    with pytest.raises(UserError, match="expected splits.json"):
        load_benchmark("dci", tmp_path)
    (tmp_path / "Urban1k" / "caption").mkdir(parents=True)
    (tmp_path / "Urban1k" / "caption" / "1.txt").write_text("A thing.", "utf-8")
    data = load_benchmark("urban1k", tmp_path / "Urban1k")
    with pytest.raises(UserError, match="1 of 1 images missing"):
        data.check_images()
    broken = tmp_path / "s.json"
    broken.write_text('[{"id": "1", "image": "a.jpg", "conversations": [', "utf-8")
    with pytest.raises(UserError, match="truncated"):
        load_benchmark("sharegpt4v-1k", broken)


def test_a_record_missing_a_field_is_a_user_error(tmp_path):
    (tmp_path / "docci_descriptions.jsonlines").write_text('{"split": "test", "description": "No file."}\n', "utf-8")
    with pytest.raises(UserError, match="not a docci layout"):
        load_benchmark("docci", tmp_path)


def test_suite_pairs_data_labels_models_and_shapes_json(tmp_path):
    from caption_debias.evaluate.suite import model_labels, output_json, pair_data

    (tmp_path / "run").mkdir()
    specs = pair_data([], [tmp_path / "a", tmp_path / "b"], None)
    assert [(s.benchmark, s.label) for s in specs] == [("prepared", "a"), ("prepared", "b")]
    assert [s.label for s in pair_data(["coco", "imagefolder"], [tmp_path, tmp_path / "classes"], None)] == [
        "coco",
        "classes",
    ]
    for bench, paths, match in (
        (["coco"], [tmp_path, tmp_path], "in pairs"),
        (["imagenet"], [tmp_path], "unknown benchmark"),
        ([], [tmp_path / "x", tmp_path / "y" / "x"], "named twice"),
        ([], [], "give --data"),
    ):
        with pytest.raises(UserError, match=match):
            pair_data(bench, paths, None)
    assert model_labels([str(tmp_path / "run"), "tiny", "tiny", "hf-hub:o/r"]) == [
        "run",
        "tiny",
        "tiny#2",
        "hf-hub:o/r",
    ]
    table = {"keep": {"t2i": {"r1": 1.0}, "i2t": {"r1": 2.0}}}
    assert output_json({"m": {"d": table}}) == table
    assert output_json({"m": {"d": table, "e": table}}) == {"m": {"d": table, "e": table}}
    assert output_json({"m": {"d": table}, "n": {"d": table}}) == {"m": {"d": table}, "n": {"d": table}}
