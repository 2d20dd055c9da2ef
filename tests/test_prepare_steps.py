"""process_records: whole-chunk summary scoring and tokenization write what the caption-by-caption path writes."""

import datetime
import json

import pyarrow as pa
import pytest

from caption_debias.prepare.steps import _bools, _strings, process_records
from caption_debias.prepare.stream import sorted_json_encoder
from caption_debias.records import Record

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
    table2, rejects2 = process_records(records, "fast", mode, batch_scores=False)
    assert table.equals(table2)
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
