"""The text steps over one chunk: split into sentences, flag summaries, tokenize, build the Arrow table."""

from __future__ import annotations

import json
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


def process_records(records: list[tuple[str, Record]], segmenter_name: str, summary_mode: str) -> tuple[pa.Table, list[Reject]]:
    """Rows for the records that pass the text steps, and rejects (in order) for those that do not."""
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    segmenter, tokenizer = get_segmenter(segmenter_name), get_tokenizer()
    rows: list[dict[str, Any]] = []
    rejects: list[Reject] = []
    for key, rec in records:
        try:
            text = text_row(rec.caption, segmenter, tokenizer, summary_mode)
            meta = {"source_id": rec.source_id, "input": rec.input, "location": rec.location, **rec.meta}
            meta_json = json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str)
            meta_json.encode("utf-8")  # lone surrogates (undecodable input bytes) fail here
        except UnicodeEncodeError:
            rejects.append(Reject(rec.input, rec.location, "undecodable bytes", excerpt(rec.caption)))
            continue
        except Exception as exc:  # one odd caption must not stop the run: it becomes a reject
            rejects.append(Reject(rec.input, rec.location, f"text processing failed: {type(exc).__name__}: {exc}", excerpt(rec.caption)))
            continue
        if not text["sentences"]:
            rejects.append(Reject(rec.input, rec.location, "no sentences", excerpt(rec.caption)))
            continue
        rows.append({
            "key": key, "source": rec.source, "split": rec.split, "image": rec.image, "caption": rec.caption,
            **text,
            "meta": meta_json,
        })
    return pa.Table.from_pylist(rows, schema=shard_arrow_schema()), rejects
