"""The write step: one input shard -> its kept rows, with the image and signal columns, as a curated shard.

Runs in a worker. The text columns are copied from the input shard untouched (Arrow
`take`), so a kept row's caption, sentences and token ids stay byte for byte the same.
Removed rows become removed.jsonl lines, returned in the sidecar and written in order by
the driver. With --embed-images the image files are read again here, a row group at a time,
so memory stays bounded however large the images are.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from caption_debias import runner, storage
from caption_debias.curate.options import REASONS
from caption_debias.image_source import ImageSource, Root
from caption_debias.input_folders import InputShard
from caption_debias.records import excerpt
from caption_debias.runner import Task, atomic_output, part_name, sha256_file, shard_name, write_json, write_shard
from caption_debias.schema import shard_arrow_schema, shard_table

WRITE_DIR = ".curate/write"
EMBED_ROW_GROUP = 256  # rows per Parquet row group with --embed-images (bounds worker memory)
IMAGE_COLUMNS = ["image_width", "image_height", "image_sha256", "image_phash"]
SIGNAL_COLUMNS = ["caption_repetition", "caption_repeated_sentences", "caption_truncated"]
SIDECAR_VERSION = 2  # bump when the sidecar gains a field the driver reads: older sidecars are then redone


def sidecar_name(index: int) -> str:
    return part_name(WRITE_DIR, index)


@dataclass(frozen=True)
class WriteParams:
    """What every write task of a run shares: the options that shape a curated shard."""

    image_root: str | None
    embed: bool
    alignment: dict[str, Any] | None  # low_alignment's thresholds, for its removed lines' detail
    drop_ungrounded: float | None


@dataclass(frozen=True)
class ShardWrite:
    """One write task's own work: an input shard, its signals file and what the decisions made of its rows."""

    shard: InputShard
    signals: str
    signals_sha256: str
    removed: dict[str, list]  # local row (as text) -> [reason code, detail or None]
    duplicate_count: dict[str, int]  # local row (as text) -> rows it stands for
    unmasked: tuple[int, ...] = ()  # local rows --keep-keys kept: their sentences are never masked


def fingerprint(work: ShardWrite, params: WriteParams) -> str:
    """What a curated shard is made from: the input shard, its signals, the decisions on its rows, the options."""
    return runner.fingerprint(
        {
            "sha256": work.shard.sha256,
            "signals_sha256": work.signals_sha256,
            "removed": work.removed,
            "duplicate_count": work.duplicate_count,
            "unmasked": list(work.unmasked),
            "image_root": params.image_root,
            "embed": params.embed,
            "alignment": params.alignment,
            "drop_ungrounded": params.drop_ungrounded,
            "sidecar": SIDECAR_VERSION,
        }
    )


def _hex(values: list[bytes | None]) -> pa.Array:
    return pa.array([v.hex() if v is not None else None for v in values], pa.string())


def _phash_hex(col: pa.ChunkedArray) -> pa.Array:
    return pa.array([f"{v:016x}" if v is not None else None for v in col.to_pylist()], pa.string())


def _rounded(v):
    return None if v is None else round(float(v), 4)


def row_detail(reason: str, signals: pa.Table, i: int, params: WriteParams) -> dict[str, Any]:
    """The detail of a row-local reason, read from the row's own signals (and the run's thresholds)."""

    def value(name: str):
        return signals.column(name)[i].as_py()

    if reason == "low_alignment":
        return {"clip_score": _rounded(value("clip_score")), **(params.alignment or {})}
    if reason == "ungrounded_caption":
        return {"detail_grounding_max": _rounded(value("detail_grounding_max")), "threshold": params.drop_ungrounded}

    if reason == "image_unreadable":
        return {"error": value("image_error")}
    if reason == "image_too_small":
        return {"width": value("image_width"), "height": value("image_height")}
    if reason == "repetitive_caption":
        return {
            "caption_repetition": round(value("caption_repetition"), 4),
            "caption_repeated_sentences": value("caption_repeated_sentences"),
            "caption_tail_loop": value("caption_tail_loop"),
        }
    if reason == "truncated_caption":
        return {"caption_truncated": True}
    return {}


def sentence_keep_row(grounding: list[float] | None, summary: list[bool], threshold: float) -> list[bool] | None:
    """Specification: a sentence is kept when it is a summary or its grounding is at least the threshold."""
    if grounding is None:
        return None
    return [bool(s) or g is None or g >= threshold for g, s in zip(grounding, summary)]


def _unmask(masks: pa.Array | pa.ChunkedArray, kept: pa.Table, listed: np.ndarray) -> pa.Array:
    """The masks with every sentence of the `listed` rows kept (--keep-keys: never masked by a filter)."""
    if not listed.any():
        return masks
    rows = masks.to_pylist()
    lengths = kept.column("summary_mask").to_pylist()
    for i in np.flatnonzero(listed).tolist():
        rows[i] = [True] * len(lengths[i] or [])
    return pa.array(rows, pa.list_(pa.bool_()))


def sentence_keep(table: pa.Table, threshold: float) -> pa.Array:
    """sentence_keep of every row, batched (Arrow kernels on the flattened lists)."""
    import pyarrow.compute as pc

    g = table.column("sentence_grounding").combine_chunks()
    s = table.column("summary_mask").combine_chunks()
    if len(g) == 0:
        return pa.array([], pa.list_(pa.bool_()))
    if pc.any(pc.not_equal(pc.list_value_length(g), pc.list_value_length(s))).as_py():
        from caption_debias.errors import UserError

        raise UserError(
            "sentence_grounding and summary_mask disagree in length: the folder was scored before a re-prepare"
        )
    scored = g.is_valid()
    summary = pc.list_flatten(s.filter(scored))
    grounded = pc.fill_null(pc.greater_equal(pc.list_flatten(g), pa.scalar(threshold, pa.float32())), True)
    flat = pc.or_(summary, grounded)
    # list_flatten drops null lists: rebuild the offsets from the lengths (0 for a null list), nulls kept
    lengths = pc.fill_null(pc.list_value_length(g), 0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), flat, mask=g.is_null())


def mask_counts(table: pa.Table) -> dict[str, int] | None:
    """What the written rows' sentence_keep masks drop: rows with a mask, rows and sentences masked,
    sentences in the rows with a mask; None when no row has one."""
    import pyarrow.compute as pc

    keep = table.column("sentence_keep").combine_chunks() if "sentence_keep" in table.column_names else None
    if keep is None or keep.null_count == len(keep):
        return None
    keep = keep.filter(keep.is_valid())
    lengths = pc.list_value_length(keep).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(keep).to_numpy(zero_copy_only=False).astype(bool)
    dropped = np.bincount(np.repeat(np.arange(len(keep)), lengths), weights=~flat, minlength=len(keep))
    return {
        "rows": len(keep),
        "rows_masked": int((dropped > 0).sum()),
        "sentences": int(lengths.sum()),
        "sentences_masked": int(dropped.sum()),
    }


def build_table(work: ShardWrite, params: WriteParams) -> tuple[pa.Table, list[dict[str, Any]]]:
    """The kept rows with every schema column, and the removed.jsonl lines of this shard."""
    schema = shard_arrow_schema()
    table = storage.read_table(work.shard.path)
    signals = storage.read_table(work.signals)
    n = table.num_rows
    removed_at = {int(i): r for i, r in work.removed.items()}  # local row -> [reason code, detail]
    keep = np.ones(n, bool)
    keep[list(removed_at)] = False
    lines = []
    if removed_at:
        keys = table.column("key").to_pylist()
        images = table.column("image").to_pylist()
        captions = table.column("caption").to_pylist()
        for i in sorted(removed_at):
            code, detail = removed_at[i]
            detail = detail or row_detail(REASONS[code], signals, i, params)
            line = {"key": keys[i], "reason": REASONS[code], "detail": detail, "image": images[i]}
            line["caption"] = excerpt(captions[i])
            line["input"] = work.shard.folder
            lines.append(line)
    idx = pa.array(np.flatnonzero(keep))
    kept = table.take(idx)
    sig = signals.take(idx)
    columns = {}
    for field in schema:
        name = field.name
        if name in SIGNAL_COLUMNS:
            columns[name] = sig.column(name).cast(field.type)
        elif name == "duplicate_count":
            counts = np.zeros(n, np.int32)
            for row, c in work.duplicate_count.items():
                counts[int(row)] = c
            columns[name] = pa.array(counts[keep], pa.int32())
        elif name == "sentence_keep" and (params.drop_ungrounded is not None or work.unmasked):
            columns[name] = _unmask(
                sentence_keep(kept, params.drop_ungrounded)
                if params.drop_ungrounded is not None
                else kept.column(name)
                if name in kept.column_names
                else pa.nulls(kept.num_rows, pa.list_(pa.bool_())),
                kept,
                np.isin(np.flatnonzero(keep), np.array(work.unmasked, np.int64)),
            )
        elif name in IMAGE_COLUMNS and params.image_root is not None:
            if name == "image_sha256":
                columns[name] = _hex(sig.column("image_sha256").to_pylist())
            elif name == "image_phash":
                columns[name] = _phash_hex(sig.column("image_phash"))
            else:
                columns[name] = sig.column(name).cast(field.type)
        elif name in kept.column_names:
            columns[name] = kept.column(name).cast(field.type)
        else:  # a prepared shard of an older schema, or image columns this run does not compute
            columns[name] = pa.nulls(len(kept), field.type)
    return shard_table(columns, len(kept)), lines


def _write_embedded(table: pa.Table, path: Path, image_root: str) -> str:
    """Write `table` with image_bytes filled, EMBED_ROW_GROUP rows at a time (atomic, like write_shard)."""
    source = ImageSource(Root(image_root, image_root))
    col = table.schema.get_field_index("image_bytes")
    with atomic_output(path) as tmp:
        with pq.ParquetWriter(tmp, table.schema, compression="zstd") as writer:
            for start in range(0, table.num_rows, EMBED_ROW_GROUP):
                part = table.slice(start, EMBED_ROW_GROUP)
                blobs = [b if isinstance(b, bytes) else None for b in _embedded(source, part)]
                part = part.set_column(col, table.schema.field(col), pa.array(blobs, pa.binary()))
                writer.write_table(part)
        digest = sha256_file(tmp)
    return digest


def _embedded(source: ImageSource, part: pa.Table) -> list:
    """The image bytes of a row group's rows (None for a URL not downloaded under the root, or an
    image gone or swapped since the signals were taken: null, not a failed run), read through the
    source: the group's rows of one tar in one pass."""
    images, keys = part.column("image").to_pylist(), part.column("key").to_pylist()
    if any(storage.is_url(i) for i in images) and source.downloads().shards == 0:
        images = [None if storage.is_url(i) else i for i in images]
    return source.map(images, lambda data, name: data, keys)


def write(task: Task, params: WriteParams) -> dict[str, Any]:
    """Worker: the curated shard of one input shard (`task.work`, a ShardWrite). Returns the sidecar."""
    out = task.folder
    table, lines = build_table(task.work, params)
    side: dict[str, Any] = {
        "index": task.index,
        "fingerprint": task.fingerprint,
        "rows": table.num_rows,
        "read": task.work.shard.rows,
        "path": None,
        "sha256": None,
        "bytes": None,
        "removed": lines,
        "sentence_keep": mask_counts(table),
    }
    if table.num_rows:
        rel = shard_name(task.index)
        if params.embed:
            assert params.image_root is not None  # CurateOptions.validate: --embed-images needs an image root
            digest = _write_embedded(table, out / rel, params.image_root)
        else:
            digest = write_shard(table, out / rel)
        side.update(path=rel, sha256=digest, bytes=(out / rel).stat().st_size)
    write_json(side, task.sidecar_path)
    return side
