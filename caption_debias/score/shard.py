"""The map step: one input shard -> one scored shard (+ sidecar), in a worker process or a Ray actor.

Every image is encoded once (a row of the reference sample takes its embedding from the
reference file instead), every distinct text once: each whole caption and each sentence,
built from the stored ids. The batches depend on the shard alone, so the bits do not
depend on which worker, engine or worker count ran it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from caption_debias import progress, runner, storage
from caption_debias.errors import UserError
from caption_debias.image_files import ImageProblem
from caption_debias.image_source import ImageCounts, ImageSource, Root
from caption_debias.input_folders import InputShard
from caption_debias.records import excerpt
from caption_debias.runner import Task, part_name, shard_name, write_json, write_shard
from caption_debias.score import encode, signals
from caption_debias.score.writer import build_table

STEP_VERSION = 1  # bump when a signal's definition changes: old scored shards are then redone
WRITE_DIR = ".score/shards"
PHASES = ("encoding images", "encoding texts")  # a shard's rows, as the command's line names them
REFERENCE_FILE = ".score/reference.parquet"


def sidecar_name(index: int) -> str:
    return part_name(WRITE_DIR, index)


@dataclass(frozen=True)
class ShardParams:
    """What every score task of a run shares (the task's own work is its input shard): the model, checked by
    its weights' digest, the batches, the reference sample, and the options that shape the output."""

    model: str
    pretrained: str | None
    device: str
    precision: str
    weights_sha256: str
    batch_size: int
    decode_threads: int
    draft_decode: bool
    keep_embeddings: bool
    reference: str | None
    reference_sha256: str | None
    threads_for_workers: int | None  # the local pool's worker count: the cores are split between them
    shaping: dict[str, Any]

    def load_model(self) -> encode.ScoreModel:
        """The model, once per process (a pool worker, a Ray actor), refused unless its weights are the driver's."""
        return encode.cached(self.model, self.pretrained, self.device, self.precision, self.weights_sha256)


def fingerprint(shard: InputShard, params: ShardParams) -> str:
    """What a scored shard is made from: the step's version, the input shard, the model, the reference, the options."""
    what = {"sha256": shard.sha256, "start": shard.start, "image_root": shard.image_root, "model": params.model}
    return runner.fingerprint(
        {"v": STEP_VERSION, **what, "reference_sha256": params.reference_sha256, "shaping": params.shaping}
    )


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


def row_texts(tokens: pa.ChunkedArray, rows: np.ndarray) -> tuple[list, list, list[int], list[int]]:
    """The texts of these rows from their stored ids: (each whole caption, each sentence, the sentence's row
    among `rows`, row offsets into the sentences)."""
    ids, sent_off, row_off = token_parts(tokens)
    captions, sentences, sentence_row, offsets = [], [], [], [0]
    for r, i in enumerate(rows.tolist()):
        a, b = row_off[i], row_off[i + 1]
        captions.append(ids[sent_off[a] : sent_off[b]])
        for s in range(a, b):
            sentences.append(ids[sent_off[s] : sent_off[s + 1]])
            sentence_row.append(r)
        offsets.append(offsets[-1] + (b - a))
    return captions, sentences, sentence_row, offsets


def _signals(
    image_emb: np.ndarray,
    caption_emb: np.ndarray,
    sentence_emb: np.ndarray,
    sentence_row: list[int],
    ref_emb: np.ndarray,
    ref_images: list[str],
    row_images: list[str],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The signals of these rows; a reference image with the row's own image path is its own picture, not another."""
    import torch  # the model's: its thread count is this process's share of the cores

    ref_by_image: dict[str, list[int]] = {}
    for j, im in enumerate(ref_images):
        ref_by_image.setdefault(im, []).append(j)
    excluded = [np.asarray(ref_by_image.get(im, []), np.int64) for im in row_images]
    rows = np.asarray(sentence_row, np.int64)
    threads = torch.get_num_threads()
    return signals.shard_signals(image_emb, caption_emb, sentence_emb, rows, ref_emb, excluded, threads=threads)


def _source(image_root: str | None) -> ImageSource | None:
    """The source of a shard's images: its folder's root, resolved by the driver (image_source.stage)."""
    return None if not image_root else ImageSource(Root(image_root, image_root))


def _image_embeddings(
    table: pa.Table, images: list, shard: InputShard, params: ShardParams, sm: encode.ScoreModel, reference: tuple
) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Every row's image embedding (each image encoded once; a reference row's is the reference
    file's), its status and its error text. `images`: the table's image column as a list."""
    n = table.num_rows
    row_keys = table.column("key").to_pylist()
    data = table.column("image_bytes").to_pylist() if "image_bytes" in table.column_names else [None] * n
    orders = np.arange(shard.start, shard.start + n, dtype=np.int64)
    ref_orders, ref_emb = reference
    ref_at = {int(o): j for j, o in enumerate(ref_orders)}
    todo = [i for i in range(n) if int(orders[i]) not in ref_at]
    emb, status, errors = encode.encode_images(
        sm,
        [images[i] for i in todo],
        [data[i] for i in todo],
        _source(shard.image_root),
        params.batch_size,
        params.decode_threads,
        params.draft_decode,
        keys=[row_keys[i] for i in todo],
    )
    image_emb = np.full((n, sm.identity["embed_dim"]), np.nan, np.float32)
    row_status = np.full(n, encode.OK, np.int8)
    row_error: list[str | None] = [None] * n
    image_emb[todo] = emb
    for k, i in enumerate(todo):
        row_status[i], row_error[i] = status[k], errors[k]
    for i in range(n):
        j = ref_at.get(int(orders[i]))
        if j is not None:
            image_emb[i] = ref_emb[j]
    return image_emb, row_status, row_error


def _image_outcomes(
    table: pa.Table, images: list, shard: InputShard, row_status: np.ndarray, row_error: list[str | None]
) -> tuple[ImageCounts, list[dict[str, Any]]]:
    """Every row's image as looked for (stored bytes, the root, or the reference's), and a removed
    line for each row whose image could not be encoded."""
    counts = ImageCounts()
    for i in range(table.num_rows):
        ok = row_status[i] == encode.OK
        counts.add(
            None if ok else ImageProblem(encode.STATUS_REASON[int(row_status[i])], row_error[i] or ""), images[i]
        )
    removed = []
    if not (row_status == encode.OK).all():
        keys, captions = table.column("key").to_pylist(), table.column("caption").to_pylist()
        for i in np.flatnonzero(row_status != encode.OK).tolist():
            reason = encode.STATUS_REASON[int(row_status[i])]
            removed.append(_removed_line(keys[i], reason, row_error[i], images[i], captions[i], shard.folder))
    return counts, removed


def score_table(
    table: pa.Table, shard: InputShard, params: ShardParams, sm: encode.ScoreModel
) -> tuple[pa.Table, dict[str, Any]]:
    """The scored table of one input shard and its facts (removed lines, context counts)."""
    images = table.column("image").to_pylist()
    progress.begin(table.num_rows, PHASES)  # the shard's rows move in the command's line batch by batch
    progress.phase(PHASES[0])
    ref_orders, ref_images, ref_emb = read_reference(params.reference)
    if not len(ref_emb):
        ref_emb = np.zeros((0, sm.identity["embed_dim"]), np.float32)
    image_emb, row_status, row_error = _image_embeddings(table, images, shard, params, sm, (ref_orders, ref_emb))
    keep = row_status == encode.OK
    counts, removed = _image_outcomes(table, images, shard, row_status, row_error)

    kept_rows = np.flatnonzero(keep)
    captions, sentences, sentence_row, offsets = row_texts(table.column("sentence_tokens"), kept_rows)
    progress.phase(PHASES[1])
    text_emb = encode.encode_texts(sm, captions + sentences, params.batch_size)
    caption_emb, sentence_emb = text_emb[: len(captions)], text_emb[len(captions) :]
    fits = sm.context - 2  # room for ids between SOT and EOT
    over = {
        "captions_over_context": sum(len(c) > fits for c in captions),
        "sentences_over_context": sum(len(s) > fits for s in sentences),
    }

    clip, scores, grounding, has = _signals(
        image_emb[kept_rows],
        caption_emb,
        sentence_emb,
        sentence_row,
        ref_emb,
        ref_images,
        [images[i] for i in kept_rows],
    )
    keep_emb = params.keep_embeddings
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
    return out, {"removed": removed, **over, "sentences": len(sentences), "images": counts.as_dict()}


def score_shard(task: Task, params: ShardParams) -> dict[str, Any]:
    """Worker: the scored shard of one input shard (`task.work`). Returns the sidecar."""
    if params.threads_for_workers:
        encode.set_threads(params.threads_for_workers)
    sm = params.load_model()
    shard = task.work
    out = task.folder
    table = storage.read_table(shard.path)
    if table.num_rows != shard.rows:
        raise UserError(f"{shard.path}: holds {table.num_rows} rows but its manifest says {shard.rows}")
    scored, facts = score_table(table, shard, params, sm)
    side: dict[str, Any] = {
        "index": task.index,
        "fingerprint": task.fingerprint,
        "read": shard.rows,
        "rows": scored.num_rows,
        "path": None,
        "sha256": None,
        "bytes": None,
        **facts,
    }
    if scored.num_rows:
        rel = shard_name(task.index)
        digest = write_shard(scored, out / rel)
        side.update(path=rel, sha256=digest, bytes=(out / rel).stat().st_size)
    write_json(side, task.sidecar_path)
    return side
