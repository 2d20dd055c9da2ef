"""URL-set readers: DreamLIP CSV, Recap-DataComp-1B and PixelProse Parquet."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from caption_debias.errors import UserError
from caption_debias.readers import dreamlip, pixelprose, recap_datacomp
from caption_debias.records import Record, Reject


def opts(**kw):
    base = dict(caption_column="caption", key_column="key", split=None)
    base.update(kw)
    return SimpleNamespace(**base)


DREAMLIP_HEADER = ["Image Path", "raw_caption", "longIB_captions", "longSV_captions", "longLLA_captions"]


def write_dreamlip(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(DREAMLIP_HEADER)
        w.writerows(rows)


def test_dreamlip_newlines_inside_values_and_one_record_per_column(tmp_path):
    path = tmp_path / "cc3m.csv"
    write_dreamlip(
        path,
        [
            ["http://x/1.jpg", "raw one", "IB one.\nSecond line.", "SV one.\n\nMore.", "LLA one."],
            ["http://x/2.jpg", "raw two", "IB two.", "", "LLA two."],
            ["", "raw three", "IB three.", "SV three.", "LLA three."],
        ],
    )
    out = list(dreamlip.read(path, "cc3m.csv", opts(caption_column="longIB_captions,longSV_captions")))
    records = [o for o in out if isinstance(o, Record)]
    rejects = [o for o in out if isinstance(o, Reject)]
    assert len(out) == 6  # 3 rows x 2 chosen columns, every one accounted for
    assert [r.location for r in records] == ["1:longIB_captions", "1:longSV_captions", "2:longIB_captions"]
    assert records[0].caption == "IB one.\nSecond line."
    assert records[1].caption == "SV one.\n\nMore."
    assert records[0].image == "http://x/1.jpg" and records[0].meta == {"caption_column": "longIB_captions"}
    assert {(r.location, r.reason) for r in rejects} == {
        ("2:longSV_captions", "empty caption"),
        ("3:longIB_captions", "missing image"),
        ("3:longSV_captions", "missing image"),
    }


def test_dreamlip_default_column_cut_off_file_and_bad_column(tmp_path):
    path = tmp_path / "d.csv"
    write_dreamlip(path, [["http://x/1.jpg", "r", "ib", "sv one", "lla"]])
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('http://x/2.jpg,r,ib,"sv cut off\nmid')  # quote never closed: download cut off
    out = list(dreamlip.read(path, "d.csv", opts()))
    assert isinstance(out[0], Record) and out[0].caption == "sv one"
    assert isinstance(out[1], Reject) and out[1].fatal and out[1].reason.startswith("truncated input")
    with pytest.raises(UserError, match="no column 'nope'"):
        list(dreamlip.read(path, "d.csv", opts(caption_column="nope")))
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + b"Image Path,longSV_captions\nhttp://x/1.jpg,One. Two.\n")
    assert [r.caption for r in dreamlip.read(bom, "bom.csv", opts())] == ["One. Two."]


def test_recap_datacomp_re_caption_default_and_org_caption_option(tmp_path):
    path = tmp_path / "recap.parquet"
    pq.write_table(
        pa.table(
            {
                "url": ["http://a/1.jpg", "http://a/2.jpg", None],
                "re_caption": ["The image shows a cat. It sits.", "   ", "A dog."],
                "org_caption": ["cat", "alt two", "dog"],
                "key": ["000000001", "000000002", "000000003"],
                "sha256": ["aa", "bb", "cc"],
            }
        ),
        path,
    )
    out = list(recap_datacomp.read(path, "recap.parquet", opts()))
    assert isinstance(out[0], Record)
    assert (out[0].source, out[0].source_id, out[0].caption) == (
        "recap-datacomp",
        "000000001",
        "The image shows a cat. It sits.",
    )
    assert out[0].meta == {"caption_column": "re_caption", "sha256": "aa"}
    assert [(o.location, o.reason) for o in out[1:]] == [(1, "empty caption"), (2, "missing image")]
    org = list(recap_datacomp.read(path, "recap.parquet", opts(caption_column="org_caption")))
    assert [o.caption for o in org if isinstance(o, Record)] == ["cat", "alt two"]
    with pytest.raises(UserError, match="re_caption, org_caption"):
        list(recap_datacomp.read(path, "recap.parquet", opts(caption_column="vlm_caption")))


def test_pixelprose_prefix_goes_to_meta(tmp_path):
    path = tmp_path / "pp.parquet"
    pq.write_table(
        pa.table(
            {
                "uid": ["u1", "u2", "u3"],
                "url": ["http://p/1.jpg", "http://p/2.jpg", "http://p/3.jpg"],
                "key": ["k1", "k2", "k3"],
                "vlm_caption": [
                    "This image displays: A red bus. It is parked.",
                    "A tree in fog.",
                    "This image displays:  ",
                ],
            }
        ),
        path,
    )
    out = list(pixelprose.read(path, "pp.parquet", opts()))
    assert out[0].caption == "A red bus. It is parked."
    assert out[0].meta == {"caption_column": "vlm_caption", "uid": "u1", "caption_prefix": "This image displays:"}
    assert out[1].caption == "A tree in fog." and "caption_prefix" not in out[1].meta
    assert isinstance(out[2], Reject) and out[2].reason.startswith("empty caption")


def test_parquet_cut_off_is_a_fatal_reject(tmp_path):
    path = tmp_path / "cut.parquet"
    pq.write_table(pa.table({"url": ["http://a"], "re_caption": ["x"]}), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    out = list(recap_datacomp.read(path, "cut.parquet", opts()))
    assert len(out) == 1 and out[0].fatal and out[0].reason.startswith("truncated input")


def test_prepare_keys_for_url_sets(tmp_path):
    """Through the real prepare(): each reader by --format name, keys as docs/scale.md states."""
    from caption_debias.dataset import PreparedDataset
    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    csv_path = tmp_path / "cc3m.csv"
    write_dreamlip(csv_path, [["http://x/1.jpg", "r", "IB one. Two.", "SV one. Two.", "LLA."]])
    prepare(
        [csv_path],
        tmp_path / "d",
        PrepareOptions(format="dreamlip", caption_column="longIB_captions,longSV_captions", quiet=True),
    )
    rows = PreparedDataset.open(tmp_path / "d").read(["key", "image", "sentences"]).to_pylist()
    assert [r["key"] for r in rows] == ["dreamlip/cc3m:1:longIB_captions", "dreamlip/cc3m:1:longSV_captions"]
    assert rows[1]["sentences"] == ["SV one.", "Two."]

    pp = tmp_path / "pp.parquet"
    pq.write_table(
        pa.table(
            {
                "url": ["http://p/1.jpg", "http://p/2.jpg"],
                "key": ["k1", "k1"],
                "vlm_caption": ["This image displays: A bus. It is red.", "A tree."],
            }
        ),
        pp,
    )
    m = prepare([pp], tmp_path / "p", PrepareOptions(format="pixelprose", quiet=True))
    rows = PreparedDataset.open(tmp_path / "p").read(["key", "caption", "meta"]).to_pylist()
    assert [r["key"] for r in rows] == ["pixelprose/k1", "pixelprose/k1#2"] and m["counts"]["duplicate_keys"] == 1
    assert (
        rows[0]["caption"] == "A bus. It is red."
        and json.loads(rows[0]["meta"])["caption_prefix"] == "This image displays:"
    )
