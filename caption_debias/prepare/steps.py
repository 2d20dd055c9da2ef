"""The text steps over one chunk: split into sentences, flag summaries, tokenize, build the Arrow table."""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from caption_debias.prepare.stream import sorted_json_encoder
from caption_debias.records import Record, Reject, excerpt
from caption_debias.schema import shard_arrow_schema


def text_row(caption: str, segmenter, tokenizer, summary_mode: str) -> dict[str, Any]:
    """The text columns of one caption (sentences, spans, tokens, summary flags)."""
    from caption_debias.text import summary

    spans = segmenter.spans(caption)
    sentences = [caption[s:e].strip() for s, e in spans]
    scores = summary.summary_scores(sentences)
    sentence_tokens, num_tokens = tokenizer.encode_caption(caption, spans)  # skips a 2nd pass when it can
    return {
        "sentences": sentences,
        "sentence_spans": [{"start": s, "end": e} for s, e in spans],
        "sentence_tokens": sentence_tokens,
        "num_tokens": num_tokens,
        "summary_mask": summary.summary_mask(sentences, scores, summary_mode),
        "summary_scores": [float(x) for x in scores],
    }


_META_JSON = sorted_json_encoder()  # = json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)


# Columns are made with pa.Array.from_buffers from numpy buffers, never pa.array(): pyarrow's
# array-like check in pa.array() imports pandas on first use (~0.3 s CPU in every process).
def _numeric(arrow_type: pa.DataType, values: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def _offsets(lengths: list[int]) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError("list column exceeds 2**31 values in one chunk")
    return _numeric(pa.int32(), offsets.astype(np.int32))


def _bools(values: list[bool]) -> pa.Array:
    return pa.Array.from_buffers(
        pa.bool_(), len(values), [None, pa.py_buffer(np.packbits(np.array(values, np.bool_), bitorder="little"))]
    )


def _strings(values: list[str | None]) -> pa.Array:
    """A string array; None is a null."""
    validity = None
    try:
        data = list(map(str.encode, values))
    except TypeError:  # None (a record without a split) or a non-string
        if not all(v is None or isinstance(v, str) for v in values):
            return pa.array(values, pa.string())  # raises as it always did
        valid = np.array([v is not None for v in values], np.bool_)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        data = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    if (
        offsets[-1] > np.iinfo(np.int32).max
    ):  # past the 'string' type's 2 GiB: pa.array gives a chunked column, as before
        return pa.array(values, pa.string())
    return pa.Array.from_buffers(
        pa.string(), len(data), [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))]
    )


def _merge_tokens(
    local: tuple[np.ndarray, np.ndarray],
    tokens: list[int],
    token_counts: list[int],
    row_local: list[bool],
    sent_counts: list[int],
    num_tokens: list[int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ids end to end (int32), ids per sentence and tokens per row (int32), in row order, from the
    local rows' ids (encode_sentences) and the others' (tokenized in the loop)."""
    local_ids, local_counts = local
    sent_local = np.repeat(np.array(row_local, bool), np.array(sent_counts, np.int64))
    counts = np.empty(len(sent_local), np.int64)
    counts[sent_local] = local_counts
    counts[~sent_local] = token_counts
    if not tokens:
        values = local_ids
    else:
        id_local = np.repeat(sent_local, counts)
        values = np.empty(len(id_local), np.int32)
        values[id_local] = local_ids
        values[~id_local] = tokens
    n_tok = np.array(num_tokens, np.int64)
    if len(n_tok):
        starts = np.zeros(len(sent_counts), np.int64)
        np.cumsum(sent_counts[:-1], out=starts[1:])
        n_tok = np.where(n_tok == 0, np.add.reduceat(counts, starts) + 2, n_tok)
    return values, counts, n_tok.astype(np.int32)


def _list_column(field: pa.Field, lengths: list[int], values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(_offsets(lengths), values, type=field.type)


def process_records(
    records: list[tuple[str, Record]], segmenter_name: str, summary_mode: str, batch_scores: bool = True
) -> tuple[pa.Table, list[Reject]]:
    """Rows for the records that pass the text steps, and rejects (in order) for those that do not.

    Columns are built as flat value lists plus per-row lengths (pa.ListArray.from_arrays)
    rather than per-row dicts through Table.from_pylist: the same values, at a third of
    the cost of the Arrow step. Summary scores and flags come from numpy passes over the
    chunk's sentences (summary_scores_flat, summary_mask_batch), and the ids of captions that need no ftfy from one Arrow pass
    (tokenizer.encode_sentences); should either ever fail, the chunk is redone caption by
    caption (batch_scores=False), so a caption that breaks them becomes a reject as before.
    """
    from caption_debias.text import summary
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    segmenter, tokenizer = get_segmenter(segmenter_name), get_tokenizer()
    spans_of, scores_of, mask_of, encode_caption = (
        segmenter.spans,
        summary.summary_scores,
        summary.summary_mask,
        tokenizer.encode_caption,
    )
    local_of = tokenizer.local_caption
    dumps = _META_JSON
    batch_scores = (
        batch_scores and summary_mode in summary.SUMMARY_MODES
    )  # else every row fails in summary_mask, as before
    keys, sources, splits, images, captions, metas, num_tokens = [], [], [], [], [], [], []
    sent_counts: list[int] = []  # sentences per row
    sentences: list[str] = []
    # Flat lists of ints, filled as the rows go: keeping the segmenter's tuples or the tokenizer's
    # lists alive until the chunk ends would give the garbage collector ~10^5 more objects to scan.
    span_bounds: list[int] = []  # start, end of every sentence, end to end
    # Batched, captions whose cleaning is local to each character (all but ~2%) are tokenized
    # after the loop, all at once (tokenizer.encode_sentences); the others here, as before.
    tokens: list[int] = []  # ids of the sentences tokenized here, end to end
    token_counts: list[int] = []  # ids per sentence tokenized here
    local_sentences: list[str] = []  # the sentences tokenized after the loop
    row_local: list[bool] = []  # per row: its sentences are in local_sentences
    masks: list[bool] = []  # per-caption path only (batched: arrays after the loop)
    scores: list[float] = []
    rejects: list[Reject] = []
    # No gc.disable() here: measured at 20k rows, it saved ~1.5 us of ~150 a caption, nearly all one full collection it only postpones.
    for key, rec in records:
        caption = rec.caption
        try:
            spans = spans_of(caption)
            sents = [caption[s:e].strip() for s, e in spans]
            if not batch_scores:
                sc = scores_of(sents)
            plan = local_of(caption, spans) if batch_scores else None
            if plan is None or not plan.batched:
                toks, n_tok = encode_caption(caption, spans)  # skips a 2nd pass when it can
            else:
                toks = None
                n_tok = (
                    0 if plan.tiled else plan.num_tokens
                )  # 0: the sum of its sentences' ids + 2, known after the loop
            if not batch_scores:
                mask = mask_of(sents, sc, summary_mode)
            meta = {"source_id": rec.source_id, "input": rec.input, "location": rec.location, **rec.meta}
            meta_json = dumps(meta)
            meta_json.encode("utf-8")  # lone surrogates (undecodable input bytes) fail here
        except UnicodeEncodeError:
            rejects.append(Reject(rec.input, rec.location, "undecodable bytes", excerpt(caption)))
            continue
        except Exception as exc:  # one odd caption must not stop the run: it becomes a reject
            rejects.append(
                Reject(
                    rec.input, rec.location, f"text processing failed: {type(exc).__name__}: {exc}", excerpt(caption)
                )
            )
            continue
        if not sents:
            rejects.append(Reject(rec.input, rec.location, "no sentences", excerpt(caption)))
            continue
        keys.append(key)
        sources.append(rec.source)
        splits.append(rec.split)
        images.append(rec.image)
        captions.append(caption)
        metas.append(meta_json)
        num_tokens.append(n_tok)
        sent_counts.append(len(sents))
        sentences += sents
        span_bounds += chain.from_iterable(spans)
        if toks is None:
            local_sentences += sents
        else:
            for t in toks:
                tokens += t
            token_counts += map(len, toks)
        row_local.append(toks is None)
        if not batch_scores:
            masks += mask
            scores += sc
    if batch_scores:
        try:
            token_values, token_counts, num_tokens = _merge_tokens(
                tokenizer.encode_sentences(local_sentences), tokens, token_counts, row_local, sent_counts, num_tokens
            )
            # flat arrays over the chunk: no per-row lists for the garbage collector to scan
            scores = summary.summary_scores_flat(sentences, sent_counts)
            masks = summary.summary_mask_batch(sentences, sent_counts, scores, summary_mode)
        except Exception:  # not seen: redo the chunk caption by caption, where a failure is one reject
            return process_records(records, segmenter_name, summary_mode, batch_scores=False)
    schema = shard_arrow_schema()
    f = schema.field
    flat_spans = np.fromiter(span_bounds, np.int32, len(span_bounds))
    spans_struct = pa.StructArray.from_arrays(
        [
            _numeric(pa.int32(), np.ascontiguousarray(flat_spans[0::2])),
            _numeric(pa.int32(), np.ascontiguousarray(flat_spans[1::2])),
        ],
        fields=list(f("sentence_spans").type.value_type),
    )
    if not batch_scores:
        token_values = np.fromiter(tokens, np.int32, len(tokens))
        num_tokens = np.fromiter(num_tokens, np.int32, len(num_tokens))
    inner_tokens = _list_column(f("sentence_tokens").type.value_field, token_counts, _numeric(pa.int32(), token_values))
    columns = [
        _strings(keys),
        _strings(sources),
        _strings(splits),
        _strings(images),
        _strings(captions),
        _list_column(f("sentences"), sent_counts, _strings(sentences)),
        _list_column(f("sentence_spans"), sent_counts, spans_struct),
        _list_column(f("sentence_tokens"), sent_counts, inner_tokens),
        _numeric(pa.int32(), num_tokens),
        _list_column(f("summary_mask"), sent_counts, _bools(masks)),
        _list_column(f("summary_scores"), sent_counts, _numeric(pa.float32(), np.array(scores, np.float32))),
        _strings(metas),
    ]
    return pa.Table.from_arrays(columns, schema=schema), rejects
