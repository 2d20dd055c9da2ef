"""The text steps over one chunk: split into sentences, flag summaries, tokenize, build the Arrow table."""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Any

import pyarrow as pa

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


# Built once: json.dumps with options builds a new encoder per call.
_META_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True, default=str)


def _offsets(lengths: list[int]) -> pa.Array:
    return pa.array(list(accumulate(lengths, initial=0)), pa.int32())


def _list_column(field: pa.Field, lengths: list[int], values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(_offsets(lengths), values, type=field.type)


def process_records(records: list[tuple[str, Record]], segmenter_name: str, summary_mode: str,
                    batch_scores: bool = True) -> tuple[pa.Table, list[Reject]]:
    """Rows for the records that pass the text steps, and rejects (in order) for those that do not.

    Columns are built as flat value lists plus per-row lengths (pa.ListArray.from_arrays)
    rather than per-row dicts through Table.from_pylist: the same values, at a third of
    the cost of the Arrow step. Summary scores come from one numpy pass over the chunk
    (summary_scores_batch); should it ever fail, the chunk is redone caption by caption,
    so a caption that breaks scoring becomes a reject as before.
    """
    from caption_debias.text import summary
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    segmenter, tokenizer = get_segmenter(segmenter_name), get_tokenizer()
    spans_of, scores_of, mask_of, encode_caption = segmenter.spans, summary.summary_scores, summary.summary_mask, tokenizer.encode_caption
    dumps = _META_JSON.encode  # = json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)
    batch_scores = batch_scores and summary_mode in summary.SUMMARY_MODES  # else every row fails in summary_mask, as before
    row_sentences: list[list[str]] = []
    keys, sources, splits, images, captions, metas, num_tokens = [], [], [], [], [], [], []
    sent_counts: list[int] = []  # sentences per row
    sentences: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    tokens: list[int] = []  # all sentences' ids end to end
    token_counts: list[int] = []  # ids per sentence
    masks: list[bool] = []
    scores: list[float] = []
    rejects: list[Reject] = []
    for key, rec in records:
        caption = rec.caption
        try:
            spans = spans_of(caption)
            sents = [caption[s:e].strip() for s, e in spans]
            if not batch_scores:
                sc = scores_of(sents)
            toks, n_tok = encode_caption(caption, spans)  # skips a 2nd pass when it can
            if not batch_scores:
                mask = mask_of(sents, sc, summary_mode)
            meta = {"source_id": rec.source_id, "input": rec.input, "location": rec.location, **rec.meta}
            meta_json = dumps(meta)
            meta_json.encode("utf-8")  # lone surrogates (undecodable input bytes) fail here
        except UnicodeEncodeError:
            rejects.append(Reject(rec.input, rec.location, "undecodable bytes", excerpt(caption)))
            continue
        except Exception as exc:  # one odd caption must not stop the run: it becomes a reject
            rejects.append(Reject(rec.input, rec.location, f"text processing failed: {type(exc).__name__}: {exc}", excerpt(caption)))
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
        for s, e in spans:
            starts.append(s)
            ends.append(e)
        for t in toks:
            tokens += t
            token_counts.append(len(t))
        if batch_scores:
            row_sentences.append(sents)
        else:
            masks += mask
            scores += sc
    if batch_scores:
        try:
            for sents, sc in zip(row_sentences, summary.summary_scores_batch(row_sentences)):
                masks += mask_of(sents, sc, summary_mode)
                scores += sc
        except Exception:  # not seen: redo the chunk caption by caption, where a failure is one reject
            return process_records(records, segmenter_name, summary_mode, batch_scores=False)
    schema = shard_arrow_schema()
    f = schema.field
    spans_struct = pa.StructArray.from_arrays(
        [pa.array(starts, pa.int32()), pa.array(ends, pa.int32())], fields=list(f("sentence_spans").type.value_type)
    )
    inner_tokens = _list_column(f("sentence_tokens").type.value_field, token_counts, pa.array(tokens, pa.int32()))
    columns = [
        pa.array(keys, pa.string()),
        pa.array(sources, pa.string()),
        pa.array(splits, pa.string()),
        pa.array(images, pa.string()),
        pa.array(captions, pa.string()),
        _list_column(f("sentences"), sent_counts, pa.array(sentences, pa.string())),
        _list_column(f("sentence_spans"), sent_counts, spans_struct),
        _list_column(f("sentence_tokens"), sent_counts, inner_tokens),
        pa.array(num_tokens, pa.int32()),
        _list_column(f("summary_mask"), sent_counts, pa.array(masks, pa.bool_())),
        _list_column(f("summary_scores"), sent_counts, pa.array(scores, pa.float32())),
        pa.array(metas, pa.string()),
    ]
    return pa.Table.from_arrays(columns, schema=schema), rejects
