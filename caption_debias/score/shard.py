"""The map step: one input shard -> one scored shard (+ sidecar), in a worker process or a Ray actor.

Every image is encoded once (a row of the reference sample takes its embedding from the
reference file instead), every distinct text once: each whole caption and each sentence,
built from the stored ids. The batches depend on the shard alone, so the bits do not
depend on which worker, engine or worker count ran it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.prepare import state
from caption_debias.records import excerpt
from caption_debias.runner import load_sidecar as runner_sidecar
from caption_debias.runner import write_json, write_shard
from caption_debias.score import encode, signals
from caption_debias.score.writer import build_table

STEP_VERSION = 1  # bump when a signal's definition changes: old scored shards are then redone
WRITE_DIR = ".score/shards"
REFERENCE_FILE = ".score/reference.parquet"


def sidecar_path(out: Path, index: int) -> Path:
    return out / WRITE_DIR / f"part-{index:05d}.json"


def fingerprint(task: dict[str, Any]) -> str:
    keys = ("sha256", "start", "image_root", "model", "reference_sha256", "shaping")
    blob = json.dumps({"v": STEP_VERSION, **{k: task[k] for k in keys}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def token_parts(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """From list<list<int32>>: (ids end to end, sentence offsets into them, row offsets into sentences)."""
    st = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    row_off = np.asarray(st.offsets, np.int64)
    row_off = row_off - row_off[0]
    sents = st.flatten()
    sent_off = np.asarray(sents.offsets, np.int64)
    sent_off = sent_off - sent_off[0]
    ids = np.asarray(sents.flatten(), np.int64) if len(sents) else np.zeros(0, np.int64)
    return ids, sent_off, row_off


def read_reference(path: str | None) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(orders [K], image paths [K], embeddings [K, D]) of the reference sample."""
    if path is None:
        return np.zeros(0, np.int64), [], np.zeros((0, 0), np.float32)
    t = storage.read_table(path)
    orders = np.asarray(t.column("order").combine_chunks(), np.int64)
    emb = t.column("embedding").combine_chunks()
    dim = emb.type.list_size if len(emb) else 0
    flat = np.asarray(emb.flatten(), np.float32).reshape(len(orders), dim)
    return orders, t.column("image").to_pylist(), flat


def _removed_line(key: str, reason: str, error: str | None, image: str, caption: str, folder: str) -> dict:
    return {
        "key": key,
        "reason": reason,
        "detail": {"error": error},
        "image": image,
        "caption": excerpt(caption),
        "input": folder,
    }


def score_table(table: pa.Table, task: dict[str, Any], sm: encode.ScoreModel) -> tuple[pa.Table, dict[str, Any]]:
    """The scored table of one input shard and its facts (removed lines, context counts)."""
    n = table.num_rows
    images = table.column("image").to_pylist()
    data = table.column("image_bytes").to_pylist() if "image_bytes" in table.column_names else [None] * n
    orders = np.arange(task["start"], task["start"] + n, dtype=np.int64)
    ref_orders, ref_images, ref_emb = read_reference(task["reference"])
    ref_at = {int(o): j for j, o in enumerate(ref_orders)}
    dim = sm.identity["embed_dim"]
    if not len(ref_emb):
        ref_emb = np.zeros((0, dim), np.float32)

    # images: each encoded once; a reference row's embedding is the reference file's
    todo = [i for i in range(n) if int(orders[i]) not in ref_at]
    root = Path(task["image_root"]) if task["image_root"] else None
    emb, status, errors = encode.encode_images(
        sm, [images[i] for i in todo], [data[i] for i in todo], root, task["batch_size"], task["decode_threads"]
    )
    image_emb = np.full((n, dim), np.nan, np.float32)
    row_status = np.full(n, encode.OK, np.int8)
    row_error: list[str | None] = [None] * n
    image_emb[todo] = emb
    for k, i in enumerate(todo):
        row_status[i], row_error[i] = status[k], errors[k]
    for i in range(n):
        j = ref_at.get(int(orders[i]))
        if j is not None:
            image_emb[i] = ref_emb[j]
    keep = row_status == encode.OK
    removed = []
    if not keep.all():
        keys, captions = table.column("key").to_pylist(), table.column("caption").to_pylist()
        for i in np.flatnonzero(~keep).tolist():
            reason = encode.STATUS_REASON[int(row_status[i])]
            removed.append(_removed_line(keys[i], reason, row_error[i], images[i], captions[i], task["folder"]))

    # texts of the kept rows: the whole caption and each sentence, from the stored ids
    ids, sent_off, row_off = token_parts(table.column("sentence_tokens"))
    kept_rows = np.flatnonzero(keep)
    captions, sentences, sentence_row, offsets = [], [], [], [0]
    for r, i in enumerate(kept_rows.tolist()):
        a, b = row_off[i], row_off[i + 1]
        captions.append(ids[sent_off[a] : sent_off[b]])
        for s in range(a, b):
            sentences.append(ids[sent_off[s] : sent_off[s + 1]])
            sentence_row.append(r)
        offsets.append(offsets[-1] + (b - a))
    text_emb = encode.encode_texts(sm, captions + sentences, task["batch_size"])
    caption_emb, sentence_emb = text_emb[: len(captions)], text_emb[len(captions) :]
    fits = sm.context - 2  # room for ids between SOT and EOT
    over = {
        "captions_over_context": sum(len(c) > fits for c in captions),
        "sentences_over_context": sum(len(s) > fits for s in sentences),
    }

    # a reference image with the row's own image path is its own picture, not another image
    ref_by_image: dict[str, list[int]] = {}
    for j, im in enumerate(ref_images):
        ref_by_image.setdefault(im, []).append(j)
    excluded = [np.asarray(ref_by_image.get(images[i], []), np.int64) for i in kept_rows.tolist()]
    clip, scores, grounding, has = signals.shard_signals(
        image_emb[kept_rows], caption_emb, sentence_emb, np.asarray(sentence_row, np.int64), ref_emb, excluded
    )
    keep_emb = task["keep_embeddings"]
    out = build_table(
        table,
        keep,
        clip,
        scores,
        np.nan_to_num(grounding, nan=0.0),
        np.asarray(offsets, np.int64),
        has,
        image_emb[kept_rows] if keep_emb else None,
        caption_emb if keep_emb else None,
    )
    return out, {"removed": removed, **over, "sentences": len(sentences)}


def score_shard(task: dict[str, Any]) -> dict[str, Any]:
    """Worker: the scored shard of one input shard. Returns the sidecar."""
    if task.get("threads_for_workers"):
        encode.set_threads(task["threads_for_workers"])
    sm = encode.cached(task["model"], task["pretrained"], task["device"], task["precision"], task["weights_sha256"])
    out = storage.as_path(task["out"])
    table = storage.read_table(task["path"])
    if table.num_rows != task["rows"]:
        raise UserError(f"{task['path']}: holds {table.num_rows} rows but its manifest says {task['rows']}")
    scored, facts = score_table(table, task, sm)
    side: dict[str, Any] = {
        "index": task["index"],
        "fingerprint": task["fingerprint"],
        "read": task["rows"],
        "rows": scored.num_rows,
        "path": None,
        "sha256": None,
        "bytes": None,
        **facts,
    }
    if scored.num_rows:
        rel = state.shard_name(task["index"])
        digest = write_shard(scored, out / rel)
        side.update(path=rel, sha256=digest, bytes=(out / rel).stat().st_size)
    write_json(side, sidecar_path(out, task["index"]))
    return side


def load_sidecar(out: Path, index: int, fp: str) -> dict[str, Any] | None:
    return runner_sidecar(sidecar_path(out, index), fp, out)
