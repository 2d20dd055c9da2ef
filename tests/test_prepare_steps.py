"""process_records: whole-chunk summary scoring and tokenization write what the caption-by-caption definition writes."""

import datetime
import json

import pyarrow as pa
import pytest

from caption_debias.prepare.steps import _bools, _strings, process_records
from caption_debias.prepare.stream import sorted_json_encoder
from caption_debias.records import Record, Reject, excerpt
from caption_debias.schema import shard_arrow_schema
from caption_debias.text import summary
from caption_debias.text.segment import get_segmenter
from caption_debias.text.tokenize import get_tokenizer

CAPTIONS = [
    "A red bicycle leans on a fence. The bicycle has a basket. Its tires are worn.",
    "Dr. Smith’s “new” bike, e.g. a 3.5 m frame. It’s red!\n\nOverall, a calm scene.",
    "",
    "   ",
    "Caf\u00e9 &amp; bar. The image shows a caf\u00e9 at 08:45 p.m. A dog waits.",
    "Tabs\tand\x0bodd  whitespace. The end\u2026 Really?!",
    "One sentence only",
    "1. A list\n2. Of items",
    "A red car.It is parked.\u2018Quoted\u2019 text \u2014 with dashes.",  # sentences not split by whitespace
]


def _reference(records, mode):
    """The text steps caption by caption, row dicts through Table.from_pylist: what process_records
    computes per chunk, with the summary specification (summary_scores) and encode_caption."""
    seg, tok = get_segmenter("fast"), get_tokenizer()
    rows, rejects = [], []
    for key, rec in records:
        caption = rec.caption
        try:
            spans = seg.spans(caption)
            sents = [caption[s:e].strip() for s, e in spans]
            scores = summary.summary_scores(sents)
            ids, n = tok.encode_caption(caption, spans)
            mask = summary.summary_mask(sents, scores, mode)
            meta = {"source_id": rec.source_id, "input": rec.input, "location": rec.location, **rec.meta}
            meta_json = json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)
            meta_json.encode("utf-8")
        except UnicodeEncodeError:
            rejects.append(Reject(rec.input, rec.location, "undecodable bytes", excerpt(caption)))
            continue
        except Exception as exc:
            reason = f"text processing failed: {type(exc).__name__}: {exc}"
            rejects.append(Reject(rec.input, rec.location, reason, excerpt(caption)))
            continue
        if not sents:
            rejects.append(Reject(rec.input, rec.location, "no sentences", excerpt(caption)))
            continue
        rows.append(
            {
                "key": key,
                "source": rec.source,
                "split": rec.split,
                "image": rec.image,
                "caption": caption,
                "sentences": sents,
                "sentence_spans": [{"start": s, "end": e} for s, e in spans],
                "sentence_tokens": ids,
                "num_tokens": n,
                "summary_mask": mask,
                "summary_scores": scores,
                "meta": meta_json,
            }
        )
    return pa.Table.from_pylist(rows, schema=shard_arrow_schema()), rejects


@pytest.mark.parametrize("mode", ["detect", "first", "none"])
def test_batched_and_per_caption_tables_are_equal(mode):
    records = [
        (
            f"k{i}",
            Record(
                source="table",
                input="in.jsonl",
                location=i + 1,
                source_id=str(i),
                image=f"{i}.jpg",
                caption=c,
                meta={"n": i},
            ),
        )
        for i, c in enumerate(CAPTIONS * 3)
    ]
    # undecodable bytes in an extra field: rejected in the middle of the chunk
    records.insert(
        5,
        (
            "bad",
            Record(
                source="table",
                input="in.jsonl",
                location=99,
                source_id="bad",
                image="b.jpg",
                caption="A fine caption.",
                meta={"x": "\udc80"},
            ),
        ),
    )
    table, rejects = process_records(records, "fast", mode)
    table2, rejects2 = _reference(records, mode)
    # scores: the batch adds a sentence's word weights in another order than the specification
    scores, scores2 = (t.column("summary_scores").combine_chunks().flatten().to_pylist() for t in (table, table2))
    assert scores == pytest.approx(scores2, rel=0, abs=1e-6)
    assert table.drop_columns(["summary_scores"]).equals(table2.drop_columns(["summary_scores"]))
    assert [r.to_json() for r in rejects] == [r.to_json() for r in rejects2]
    assert len(table) + len(rejects) == len(records)
    assert {r.reason for r in rejects} == {"no sentences", "undecodable bytes"}


@pytest.mark.parametrize("values", [[], ["a", "bé", "", "\u2028x"], [None, "x", None], [None], ["x" * 1000] * 9])
def test_string_columns_equal_pa_array(values):
    assert _strings(values).equals(pa.array(values, pa.string()))


def test_string_columns_reject_what_pa_array_rejects():
    with pytest.raises((TypeError, pa.ArrowException)):
        _strings(["a", 1])


@pytest.mark.parametrize("values", [[], [True], [False, True, True] * 7])
def test_bool_columns_equal_pa_array(values):
    assert _bools(values).equals(pa.array(values, pa.bool_()))


@pytest.mark.parametrize(
    "value",
    [
        [
            "k",
            "table",
            "a.jpg",
            'Caf\u00e9 "q" \\ \n\t\x01\x7f \u2028',
            None,
            3,
            {"b": [1, {"z": None, "a": 2.5}], "a": True},
        ],
        {"x": "\udc80", "n": float("nan"), "i": float("-inf"), "big": 10**30, "f": -0.0},
        {"d": datetime.date(2024, 1, 2), "t": (1, 2), "b": b"x"},
        {},
        [],
    ],
)
def test_sorted_json_encoder_equals_json_dumps(value):
    assert sorted_json_encoder()(value) == json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def test_process_records_imports_neither_pandas_nor_torch():
    # pa.array() and Array.to_numpy() import pandas on first use (a heavy import in every worker process);
    # the hot path builds and reads Arrow arrays through buffers instead. A NUL takes the summary's regex path.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from caption_debias.prepare.steps import process_records\n"
        "from caption_debias.records import Record\n"
        f"caps = {CAPTIONS!r} + ['A nul\\x00 inside. The end.']\n"
        "recs = [(f'k{i}', Record(source='table', input='in', location=i, source_id=str(i), image='x.jpg', caption=c, meta={}))"
        " for i, c in enumerate(caps)]\n"
        "for mode in ('detect', 'first'):\n"
        "    table, rejects = process_records(recs, 'fast', mode)\n"
        "    assert len(table) + len(rejects) == len(recs)\n"
        "print('pandas' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_an_unknown_summary_mode_is_one_clear_line():
    records = [
        ("k", Record(source="table", input="in", location=1, source_id="0", image="x.jpg", caption="A dog.", meta={}))
    ]
    with pytest.raises(summary.UserError, match="unknown summary mode"):
        process_records(records, "fast", "last")


def test_shard_tables_are_built_by_column_name():
    import pyarrow as pa
    import pytest

    from caption_debias.schema import shard_arrow_schema, shard_table

    given = {"caption": pa.array(["b", "a"]), "key": pa.array(["k1", "k2"])}  # any order
    table = shard_table(given, 2)
    assert table.schema == shard_arrow_schema()
    assert table.column("key").to_pylist() == ["k1", "k2"] and table.column("caption").to_pylist() == ["b", "a"]
    assert table.column("source").null_count == 2  # not given: null
    with pytest.raises(ValueError, match="not shard columns: captions"):
        shard_table({"captions": pa.array(["x"])}, 1)
    with pytest.raises(ValueError, match="num_tokens: int64"):
        shard_table({"num_tokens": pa.array([3], pa.int64())}, 1)
    with pytest.raises(ValueError, match="1 values for 2 rows"):
        shard_table({"key": pa.array(["k"])}, 2)
