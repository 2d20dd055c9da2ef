"""Each reader on fixtures written here, in every input format, including bad records."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from input_fixtures import write_dci, write_urban1k
from pictures import picture, write

from caption_debias.errors import UserError
from caption_debias.prepare.options import PrepareOptions
from caption_debias.readers import detect, get_reader
from caption_debias.readers.common import image_problem
from caption_debias.readers.sharegpt4v import iter_array
from caption_debias.records import Record, Reject


def read_all(fmt: str, path: Path, **opts) -> tuple[list[Record], list[Reject]]:
    options = PrepareOptions(**opts)
    items = list(get_reader(fmt)(path, str(path), options))
    return [i for i in items if isinstance(i, Record)], [i for i in items if isinstance(i, Reject)]


def sharegpt_element(i: int, caption: str = None, **extra) -> dict:
    return {
        "id": f"s{i}",
        "image": f"sam/images/sa_{i}.jpg",
        **extra,
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is this photo about?"},
            {"from": "gpt", "value": caption if caption is not None else f"Photo {i}. A harbour at dusk.\n\nBoats ..."},
        ],
    }


# -- ShareGPT4V -----------------------------------------------------------------------------


@pytest.mark.parametrize("read_bytes", [1, 7, 4096])
def test_iter_array_streams_with_tiny_buffer_and_exact_byte_offsets(tmp_path, read_bytes):
    elements = [
        sharegpt_element(
            i, caption=f'Ünïcödé caption {i} ✓ \\ "q".', ok=True, no=False, none=None, x=-1.5e-7 * i, n=123456789 * i
        )
        for i in range(30)
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(elements, ensure_ascii=False, indent=1), encoding="utf-8")
    raw = path.read_bytes()
    got = list(iter_array(path, read_bytes=read_bytes))  # boundaries fall inside characters, literals, numbers
    assert [v for _, v in got] == elements
    for offset, value in got:
        assert raw[offset : offset + 1] == b"{"
        assert json.JSONDecoder().raw_decode(raw[offset:].decode("utf-8"))[0] == value


def test_sharegpt4v_bad_records_become_rejects(tmp_path):
    path = tmp_path / "s.json"
    elements = [
        sharegpt_element(0, group=7),
        {"id": "s1", "image": "a.jpg", "conversations": [{"from": "human", "value": "hi"}]},
        {"id": "s2", "image": "a.jpg"},
        "not an object",
        sharegpt_element(4, caption="   "),
        {"id": "s5", "image": "a.jpg", "conversations": [{"from": "gpt", "value": 42}]},
        {"id": "s6", "conversations": [{"from": "gpt", "value": "No image."}]},
        sharegpt_element(7),
    ]
    text = json.dumps(elements)
    path.write_bytes(text.encode().replace(b"Photo 7.", b"Photo \xff7."))  # undecodable byte in record 7
    records, rejects = read_all("sharegpt4v", path)
    assert [r.source_id for r in records] == ["s0"]
    assert records[0].meta == {"group": 7}  # extra top-level fields kept in meta
    assert records[0].caption == elements[0]["conversations"][1]["value"]
    assert [j.reason for j in rejects] == [
        "no gpt turn",
        "missing field: conversations",
        "not an object",
        "empty caption",
        "non-string caption",
        "missing field: image",
        "undecodable bytes",
    ]
    assert not any(j.fatal for j in rejects)


def test_sharegpt4v_split_field_is_the_records_split(tmp_path):
    """An element's `split` (synth writes one) is the record's split, not meta; --split names the split
    of elements without one (as for DOCCI)."""
    path = tmp_path / "s.json"
    elements = [sharegpt_element(0, split="val", group="g0"), sharegpt_element(1), sharegpt_element(2, split=3)]
    path.write_text(json.dumps(elements))
    records, rejects = read_all("sharegpt4v", path)
    assert [(r.split, r.meta) for r in records] == [("val", {"group": "g0"}), (None, {}), (None, {"split": 3})]
    records, _ = read_all("sharegpt4v", path, split="train")
    assert [r.split for r in records] == ["val", "train", "train"] and not rejects


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_sharegpt4v_cut_off_keeps_complete_records_and_names_offset(tmp_path, cut):
    elements = [sharegpt_element(i) for i in range(10)]
    full = json.dumps(elements).encode()
    path = tmp_path / "cut.json"
    data = full[: int(len(full) * cut)]
    path.write_bytes(data)
    records, rejects = read_all("sharegpt4v", path)
    n = len(records)
    assert [r.source_id for r in records] == [f"s{i}" for i in range(n)]
    assert 0 < n < 10
    assert len(rejects) == 1 and rejects[0].fatal and rejects[0].reason.startswith("truncated input")
    start = full.index(json.dumps(elements[n]).encode()[:20])  # where the cut element starts
    assert rejects[0].location == min(start, len(data))


def test_sharegpt4v_broken_element_mid_file_is_one_reject_at_its_offset(tmp_path):
    elements = [sharegpt_element(i) for i in range(50)]
    text = json.dumps(elements)
    start = text.index('{"id": "s3"')
    broken = text[:start] + '{"id": "s3", "image": sam.jpg' + text[start + 28 :]  # unquoted value
    path = tmp_path / "b.json"
    path.write_text(broken)
    items = list(iter_array(path, read_bytes=256))
    rejects = [i for i in items if isinstance(i, Reject)]
    assert [v["id"] for _, v in (i for i in items if not isinstance(i, Reject))] == [
        f"s{i}" for i in range(50) if i != 3
    ]
    assert len(rejects) == 1 and not rejects[0].fatal and rejects[0].location == start
    assert rejects[0].reason.startswith("broken JSON: Expecting value at byte")


def test_sharegpt4v_element_with_an_overlong_integer_is_a_reject(tmp_path):
    # the JSON decoder raises a plain ValueError for an integer past Python's digit limit
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if not limit:
        pytest.skip("this Python has no limit on integer digits")
    elements = [sharegpt_element(i) for i in range(5)]
    text = json.dumps(elements)
    start = text.index('{"id": "s2"')
    path = tmp_path / "n.json"
    path.write_text(text[: start + 1] + '"n": ' + "1" * (limit + 1) + ", " + text[start + 1 :])
    items = list(iter_array(path, read_bytes=256))
    rejects = [i for i in items if isinstance(i, Reject)]
    assert [v["id"] for _, v in (i for i in items if not isinstance(i, Reject))] == ["s0", "s1", "s3", "s4"]
    assert len(rejects) == 1 and not rejects[0].fatal and rejects[0].location == start
    reason = rejects[0].reason
    assert reason.startswith("broken JSON: ") and "integer string conversion" in reason
    assert reason.endswith(f" at byte {start + 6}")  # where the digits start


def test_sharegpt4v_not_an_array_is_fatal(tmp_path):
    path = tmp_path / "o.json"
    path.write_text('{"id": 1}')
    _, rejects = read_all("sharegpt4v", path)
    assert rejects[0].fatal and rejects[0].reason == "not a JSON array"


# -- image paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image,ok",
    [
        ("coco/train2017/1.jpg", True),
        ("https://x.org/a.jpg", True),
        ("file:///tmp/a.jpg", True),
        ("a/../b.jpg", True),
        ("/abs/a.jpg", False),
        ("../up.jpg", False),
        ("a/../../up.jpg", False),
        ("C:\\x.jpg", False),
        ("", False),
        (None, False),
        ("a\\..\\..\\up.jpg", False),
        ("..", False),
        ("a..b/c...jpg", True),
        ("./a.jpg", True),
    ],
)
def test_image_problem(image, ok):
    assert (image_problem(image) is None) == ok


# -- tables ---------------------------------------------------------------------------------


def test_table_jsonl_bad_lines_and_cut_off_last_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        b'{"image": "a.jpg", "caption": "One.", "key": "k1", "extra": 1}\n'
        b'{"image": "b.jpg", "caption": "Two."\n'  # broken line mid-file: a reject
        b"[1, 2]\n"  # not an object
        b'{"image": "c.jpg", "caption": "Thr\xff."}\n'  # undecodable bytes
        b'{"image": "d.jpg"}\n'  # no caption
        b'{"image": "e.jpg", "caption": "Five."}\n'
        b'{"image": "f.jpg", "capt'
    )  # cut off: fatal
    records, rejects = read_all("table", path)
    assert [(r.source_id, r.image, r.location) for r in records] == [("k1", "a.jpg", 1), (None, "e.jpg", 6)]
    assert records[0].meta == {"extra": 1}
    assert [(j.location, j.reason.split(":")[0], j.fatal) for j in rejects] == [
        (2, "broken JSON line", False),
        (3, "not an object", False),
        (4, "undecodable bytes", False),
        (5, "missing field", False),
        (7, "truncated input", True),
    ]


def test_table_jsonl_line_with_an_overlong_integer_is_a_reject(tmp_path):
    # json.loads raises a plain ValueError (no .msg) for an integer past Python's digit limit
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if not limit:
        pytest.skip("this Python has no limit on integer digits")
    path = tmp_path / "t.jsonl"
    path.write_bytes(
        b'{"image": "a.jpg", "caption": "One.", "n": ' + b"1" * (limit + 1) + b"}\n"
        b'{"image": "b.jpg", "caption": "Two."}\n'
    )
    records, rejects = read_all("table", path)
    assert [r.image for r in records] == ["b.jpg"]
    assert [(j.location, j.reason.split(": ")[0], j.fatal) for j in rejects] == [(1, "broken JSON line", False)]
    assert "integer string conversion" in rejects[0].reason


def test_table_csv_tsv_parquet_with_named_columns(tmp_path):
    rows = [
        {"filepath": f"img/{i}.jpg", "title": f"Line one {i}.\nLine two, with a comma.", "uid": f"u{i}"}
        for i in range(3)
    ]
    csv_path, tsv_path, pq_path = tmp_path / "t.csv", tmp_path / "t.tsv", tmp_path / "t.parquet"
    for path, delim in ((csv_path, ","), (tsv_path, "\t")):
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=["filepath", "title", "uid"], delimiter=delim)
            w.writeheader()
            w.writerows(rows)
    pq.write_table(pa.Table.from_pylist(rows), pq_path)
    for path in (csv_path, tsv_path, pq_path):
        assert detect(path) == "table"
        records, rejects = read_all("table", path, image_column="filepath", caption_column="title", key_column="uid")
        assert rejects == []
        assert [(r.source_id, r.image, r.caption) for r in records] == [
            (x["uid"], x["filepath"], x["title"]) for x in rows
        ]
    with pytest.raises(UserError, match="no column 'image'"):
        read_all("table", csv_path)


def test_table_csv_cut_inside_quoted_field_is_fatal(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('image,caption\na.jpg,"One."\nb.jpg,"Two, cut off', encoding="utf-8")
    records, rejects = read_all("table", path)
    assert [r.image for r in records] == ["a.jpg"]
    assert rejects[-1].fatal and rejects[-1].reason.startswith("truncated input")


def test_table_parquet_cut_off_is_fatal_reject(tmp_path):
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"image": ["a.jpg"] * 50, "caption": ["A b."] * 50}), path)
    path.write_bytes(path.read_bytes()[:-30])  # the footer is gone: nothing in the file can be trusted
    records, rejects = read_all("table", path)
    assert records == [] and len(rejects) == 1 and rejects[0].fatal and "unreadable Parquet" in rejects[0].reason


# -- COCO, DOCCI, Urban1k, DCI ------------------------------------------------------------------


def test_coco_one_record_per_caption(tmp_path):
    path = tmp_path / "captions_val2017.json"
    path.write_text(
        json.dumps(
            {
                "images": [{"id": 1, "file_name": "000001.jpg"}, {"id": 2, "file_name": "000002.jpg"}],
                "annotations": [
                    {"id": 10, "image_id": 1, "caption": "A cat."},
                    {"id": 11, "image_id": 1, "caption": "A pet."},
                    {"id": 12, "image_id": 2, "caption": ""},
                    {"id": 13, "image_id": 9, "caption": "Lost."},
                ],
            }
        )
    )
    assert detect(path) == "coco"
    records, rejects = read_all("coco", path)
    assert [(r.source_id, r.image, r.caption, r.split) for r in records] == [
        ("10", "000001.jpg", "A cat.", "val2017"),
        ("11", "000001.jpg", "A pet.", "val2017"),
    ]
    assert [j.reason for j in rejects] == ["empty caption", "unknown image_id: 9"]


def test_docci(tmp_path):
    path = tmp_path / "docci_descriptions.jsonlines"
    lines = [
        {"example_id": "train_00001", "split": "train", "image_file": "train_00001.jpg", "description": "A red door."},
        {
            "example_id": "test_00002",
            "split": "test",
            "image_file": "test_00002.jpg",
            "description": "Blue sky. Clouds.",
        },
        {"example_id": "test_00003", "split": "test", "image_file": "test_00003.jpg"},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert detect(path) == "docci" and detect(tmp_path) == "docci"
    records, rejects = read_all("docci", tmp_path)
    assert [(r.source_id, r.image, r.split, r.caption) for r in records] == [
        ("train_00001", "images/train_00001.jpg", "train", "A red door."),
        ("test_00002", "images/test_00002.jpg", "test", "Blue sky. Clouds."),
    ]
    assert [(j.location, j.reason) for j in rejects] == [(3, "missing caption")]


def test_urban1k(tmp_path):
    root = write_urban1k(tmp_path / "Urban1k")
    assert detect(tmp_path) == "urban1k" and detect(root) == "urban1k"
    records, rejects = read_all("urban1k", tmp_path)
    assert [(r.source_id, r.image, r.caption) for r in records] == [
        (str(i), f"image/{i}.jpg", f"Street {i}. Cars park.") for i in (1, 2, 10)
    ]
    assert [j.reason for j in rejects] == ["image not found: image/11.jpg"]


def test_dci_caption_modes_splits_and_mask_meta(tmp_path):
    root = tmp_path / "densely_captioned_images"
    write_dci(root)
    assert detect(tmp_path) == "dci"
    records, rejects = read_all("dci", tmp_path)
    assert [(r.source_id, r.image, r.split, r.caption) for r in records] == [
        ("1-data", "photos/sa_1.jpg", "train", "A dog.\nIt sits on grass. The sun shines."),
        ("2-data", "photos/sa_2.jpg", "test", "A wall."),
    ]
    assert records[0].meta["mask_labels"] == ["dog", "tail"] and records[0].meta["mask_count"] == 3
    assert [(j.location, j.reason.split(":")[0]) for j in rejects] == [("annotations/3-data.json", "broken JSON")]

    long, rejects = read_all("dci", root, dci_caption="extra")
    assert [r.caption for r in long] == ["It sits on grass. The sun shines."]
    assert [j.reason for j in rejects][0] == "empty extra_caption (Long-DCI)"

    masks, _ = read_all("dci", root, dci_caption="short+extra+masks")
    assert masks[0].caption == "A dog.\nIt sits on grass. The sun shines.\nA brown dog.\nIts tail wags."


# -- img2dataset (a real run over file:// URLs) ------------------------------------------------


class _NoLogger:
    """img2dataset's stats logger runs in a spawned process (a slow re-import of everything): not needed here."""

    def __init__(self, *args, **kwargs):
        pass

    def start(self):
        pass

    join = terminate = start


def test_img2dataset_real_output_folder(tmp_path, monkeypatch):
    import sys

    monkeypatch.setenv("NO_ALBUMENTATIONS_UPDATE", "1")  # no network check at import
    from img2dataset import download

    # Real Reader, Downloader and writer, run in this process instead of a spawned pool.
    i2d_main = sys.modules["img2dataset.main"]
    monkeypatch.setattr(
        i2d_main, "multiprocessing_distributor", lambda _n, downloader, reader, _s, _r: [downloader(r) for r in reader]
    )
    monkeypatch.setattr(i2d_main, "LoggerProcess", _NoLogger)

    urls = []
    for i in range(3):
        p = tmp_path / f"src{i}.png"
        write(picture((32, 24), (40 * i, 100, 200)), p)
        urls.append(p.as_uri())
    urls.insert(2, (tmp_path / "missing.png").as_uri())
    table = tmp_path / "urls.parquet"
    pq.write_table(
        pa.table(
            {"url": urls, "caption": [f"Picture {i}. Blue." for i in range(4)], "origin": [f"o{i}" for i in range(4)]}
        ),
        table,
    )
    out = tmp_path / "i2d"
    download(
        url_list=str(table),
        input_format="parquet",
        url_col="url",
        caption_col="caption",
        save_additional_columns=["origin"],
        output_folder=str(out),
        output_format="files",
        processes_count=1,
        thread_count=2,
        image_size=16,
        resize_mode="border",
    )
    assert detect(out) == "img2dataset"
    records, rejects = read_all("img2dataset", out)
    assert len(records) == 3 and len(rejects) == 1
    for r in records:
        assert (out / r.image).is_file()  # the image points at the stored sample
        assert r.meta["origin"] in {"o0", "o1", "o3"} and r.meta["url"].startswith("file://")
    assert rejects[0].reason.startswith("failed_to_download: ")
    assert "missing.png" in rejects[0].record

    # a metadata file cut off mid-way: the shard before it is kept, the cut one is a fatal reject
    data = (out / "00000.parquet").read_bytes()
    (out / "00001.parquet").write_bytes(data[: len(data) // 2])
    records2, rejects2 = read_all("img2dataset", out)
    assert len(records2) == 3 and rejects2[-1].fatal and rejects2[-1].location.startswith("00001.parquet")


# -- auto detection errors ------------------------------------------------------------------------


def test_detect_unknown_is_one_line_error(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"\x00\x01")
    with pytest.raises(UserError, match="cannot tell the format"):
        detect(tmp_path / "x.bin")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="cannot tell the format"):
        detect(tmp_path / "empty")


def test_explicit_format_that_does_not_fit_the_path_is_one_line_error(tmp_path):
    from caption_debias.readers import check_layout

    (tmp_path / "a.json").write_text("[]")
    with pytest.raises(UserError, match="does not look like dci"):
        check_layout(tmp_path / "a.json", "dci")
    with pytest.raises(UserError, match="does not look like sharegpt4v"):
        check_layout(tmp_path, "sharegpt4v")
    check_layout(tmp_path / "a.json", "sharegpt4v")
