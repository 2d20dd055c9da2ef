"""The text steps over one chunk of records: split -> tokenize -> score -> to_table.

split     each record's sentences and metadata, and the ids of the few captions whose
          cleaning needs ftfy, one by one (a failure there is that record's reject)
tokenize  the ids of all other captions' sentences in one Arrow pass (encode_sentences)
score     summary scores and flags over the chunk's sentences in numpy passes
to_table  the Arrow table, columns built from flat buffers
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Sequence, cast

import numpy as np
import pyarrow as pa

from caption_debias.prepare.stream import sorted_json_encoder
from caption_debias.records import Record, Reject, excerpt
from caption_debias.schema import shard_arrow_schema, shard_table

_META_JSON = sorted_json_encoder()  # = json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)


# Columns are made with pa.Array.from_buffers from numpy buffers, never pa.array(): pyarrow's
# array-like check in pa.array() imports pandas on first use, a start-up cost in every process.
def _numeric(arrow_type: pa.DataType, values: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def _offsets(lengths: list[int]) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError("list column exceeds 2**31 values in one chunk")
    return _numeric(pa.int32(), offsets.astype(np.int32))


def _bools(values: Sequence[bool] | np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(
        pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(np.array(values, np.bool_), bitorder="little"))]
    )


def _strings(values: Sequence[str | None]) -> pa.Array:
    """A string array; None is a null."""
    validity = None
    try:
        data = list(map(str.encode, cast(Sequence[str], values)))  # a None raises TypeError: caught below
    except TypeError:  # None (a record without a split) or a non-string
        if not all(v is None or isinstance(v, str) for v in values):
            return pa.array(values, pa.string())  # raises pa.array's own error
        valid = np.array([v is not None for v in values], np.bool_)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        data = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:  # past the 'string' type's 2 GiB: pa.array chunks the column
        return pa.array(values, pa.string())
    return pa.Array.from_buffers(
        pa.string(), len(data), [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))]
    )


@dataclass(slots=True)  # slots: its lists are looked up for every row
class _Rows:
    """The records that passed `split`, column by column as flat lists. The segmenter's tuples
    and the tokenizer's lists are flattened as rows go: kept until the chunk ends, they would
    give the garbage collector many more objects to scan."""

    keys: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    splits: list[str | None] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    captions: list[str] = field(default_factory=list)
    metas: list[str] = field(default_factory=list)
    sent_counts: list[int] = field(default_factory=list)  # sentences per row
    sentences: list[str] = field(default_factory=list)
    span_bounds: list[int] = field(default_factory=list)  # start, end of every sentence, end to end
    batched: list[bool] = field(default_factory=list)  # per row: its sentences are in batched_sentences
    batched_sentences: list[str] = field(default_factory=list)  # tokenized all at once in `tokenize`
    tiled: list[bool] = field(default_factory=list)  # per row: its length is its sentences' ids + 2
    num_tokens: list[int] = field(default_factory=list)  # per row, when not tiled
    tokens: list[int] = field(default_factory=list)  # ids of the sentences tokenized in `split`, end to end
    token_counts: list[int] = field(default_factory=list)  # ids per sentence tokenized in `split`
    rejects: list[Reject] = field(default_factory=list)


def _reject(rejects: list[Reject], rec: Record, reason: str) -> None:
    rejects.append(Reject(rec.input, rec.location, reason, excerpt(rec.caption)))


def split(records: list[tuple[str, Record]], segmenter, tokenizer) -> _Rows:
    """Each record's sentences, metadata JSON and tokenization plan (`tokenizer.local_caption`);
    a record whose text steps fail, or that has no sentence, becomes a reject, in order."""
    rows = _Rows()
    spans_of, local_of, encode_caption = segmenter.spans, tokenizer.local_caption, tokenizer.encode_caption
    for key, rec in records:
        caption = rec.caption
        try:
            spans = spans_of(caption)
            sents = [caption[s:e].strip() for s, e in spans]
            plan = local_of(caption, spans)
            toks, n_tok = (None, plan.num_tokens) if plan.batched else encode_caption(caption, spans)
            meta_json = _META_JSON(
                {"source_id": rec.source_id, "input": rec.input, "location": rec.location, **rec.meta}
            )
            meta_json.encode("utf-8")  # lone surrogates (undecodable input bytes) fail here
        except UnicodeEncodeError:
            _reject(rows.rejects, rec, "undecodable bytes")
            continue
        except Exception as exc:  # one odd caption must not stop the run: it becomes a reject
            _reject(rows.rejects, rec, f"text processing failed: {type(exc).__name__}: {exc}")
            continue
        if not sents:
            _reject(rows.rejects, rec, "no sentences")
            continue
        rows.keys.append(key)
        rows.sources.append(rec.source)
        rows.splits.append(rec.split)
        rows.images.append(rec.image)
        rows.captions.append(caption)
        rows.metas.append(meta_json)
        rows.sent_counts.append(len(sents))
        rows.sentences += sents
        rows.span_bounds += chain.from_iterable(spans)
        rows.batched.append(plan.batched)
        rows.tiled.append(plan.tiled)
        rows.num_tokens.append(n_tok)
        if toks is None:
            rows.batched_sentences += sents
        else:
            for t in toks:
                rows.tokens += t
            rows.token_counts += map(len, toks)
    return rows


@dataclass
class _Tokens:
    values: np.ndarray  # all ids end to end, in row order (int32)
    per_sentence: np.ndarray  # ids per sentence (int64)
    num_tokens: np.ndarray  # per row, with start and end (int32)


def tokenize(rows: _Rows, tokenizer) -> _Tokens:
    """The batched rows' ids (`encode_sentences`) merged in row order with those tokenized in `split`."""
    batched_ids, batched_counts = tokenizer.encode_sentences(rows.batched_sentences)
    sent_batched = np.repeat(np.array(rows.batched, bool), np.array(rows.sent_counts, np.int64))
    counts = np.empty(len(sent_batched), np.int64)
    counts[sent_batched] = batched_counts
    counts[~sent_batched] = rows.token_counts
    if not rows.tokens:
        values = batched_ids
    else:
        id_batched = np.repeat(sent_batched, counts)
        values = np.empty(len(id_batched), np.int32)
        values[id_batched] = batched_ids
        values[~id_batched] = rows.tokens
    n_tok = np.array(rows.num_tokens, np.int64)
    if len(n_tok):
        starts = np.zeros(len(rows.sent_counts), np.int64)
        np.cumsum(rows.sent_counts[:-1], out=starts[1:])
        n_tok = np.where(np.array(rows.tiled, bool), np.add.reduceat(counts, starts) + 2, n_tok)
    return _Tokens(values, counts, n_tok.astype(np.int32))


def score(rows: _Rows, summary_mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Summary scores (float64) and flags (bool) of all sentences end to end, in numpy passes over the chunk."""
    from caption_debias.text import summary

    scores = summary.summary_scores_flat(rows.sentences, rows.sent_counts)
    return scores, summary.summary_mask_batch(rows.sentences, rows.sent_counts, scores, summary_mode)


def to_table(rows: _Rows, tokens: _Tokens, scores: np.ndarray, mask: np.ndarray) -> pa.Table:
    """The shard table: flat values plus per-row lengths (pa.ListArray.from_arrays) rather
    than per-row dicts through Table.from_pylist, which costs several times more."""
    schema = shard_arrow_schema()
    f = schema.field
    flat_spans = np.fromiter(rows.span_bounds, np.int32, len(rows.span_bounds))
    spans_struct = pa.StructArray.from_arrays(
        [
            _numeric(pa.int32(), np.ascontiguousarray(flat_spans[0::2])),
            _numeric(pa.int32(), np.ascontiguousarray(flat_spans[1::2])),
        ],
        fields=list(f("sentence_spans").type.value_type),
    )
    inner_tokens = _list_column(
        f("sentence_tokens").type.value_field, tokens.per_sentence, _numeric(pa.int32(), tokens.values)
    )
    per_row = rows.sent_counts
    columns = {
        "key": _strings(rows.keys),
        "source": _strings(rows.sources),
        "split": _strings(rows.splits),
        "image": _strings(rows.images),
        "caption": _strings(rows.captions),
        "sentences": _list_column(f("sentences"), per_row, _strings(rows.sentences)),
        "sentence_spans": _list_column(f("sentence_spans"), per_row, spans_struct),
        "sentence_tokens": _list_column(f("sentence_tokens"), per_row, inner_tokens),
        "num_tokens": _numeric(pa.int32(), tokens.num_tokens),
        "summary_mask": _list_column(f("summary_mask"), per_row, _bools(mask)),
        "summary_scores": _list_column(
            f("summary_scores"), per_row, _numeric(pa.float32(), np.array(scores, np.float32))
        ),
        "meta": _strings(rows.metas),
    }
    # The columns `curate` fills (image facts, caption signals) are null in a prepared folder.
    return shard_table(columns, len(rows.keys))


def _list_column(field: pa.Field, lengths, values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(_offsets(lengths), values, type=field.type)


def process_records(
    records: list[tuple[str, Record]], segmenter_name: str, summary_mode: str
) -> tuple[pa.Table, list[Reject]]:
    """Rows for the records that pass the text steps, and rejects (in order) for those that do not."""
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    tokenizer = get_tokenizer()
    rows = split(records, get_segmenter(segmenter_name), tokenizer)
    tokens = tokenize(rows, tokenizer)
    scores, mask = score(rows, summary_mode)
    return to_table(rows, tokens, scores, mask), rows.rejects
