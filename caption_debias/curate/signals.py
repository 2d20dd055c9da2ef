"""The map step: one input shard -> one signals file of per-row facts (no decisions yet).

Runs in a worker (process pool or Ray task). Writes OUT/.curate/signals/part-NNNNN.parquet
atomically and returns a small sidecar (rows, image coverage, fingerprint) that is also
saved for resume. Every value here depends on the row alone, so the shard can be redone in
any order on any worker.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from caption_debias import runner, storage
from caption_debias.curate import images as img
from caption_debias.curate import minhash, quality
from caption_debias.curate.options import NUM_PERM
from caption_debias.runner import Task, write_json, write_shard

SIGNALS_VERSION = 4  # bump when a signal's definition changes: old signal files are then redone
SIGNALS_DIR = ".curate/signals"
INPUT_COLUMNS = ["key", "image", "caption", "sentence_tokens"]
SCORE_COLUMNS = ["clip_score", "sentence_grounding", "summary_mask"]  # read when the shard has them
EXAMPLES = 3  # example paths per coverage group and status


def band_name(band: int) -> str:
    return f"band_{band:02d}"


def signals_name(index: int) -> str:
    return f"{SIGNALS_DIR}/part-{index:05d}.parquet"


def sidecar_name(index: int) -> str:
    return f"{SIGNALS_DIR}/part-{index:05d}.json"


def signals_path(out: Path, index: int) -> Path:
    return out / signals_name(index)


def sidecar_path(out: Path, index: int) -> Path:
    return out / sidecar_name(index)


@dataclass(frozen=True)
class SignalParams:
    """What every signals task of a run shares (the task's own work is its input shard)."""

    image_root: str | None
    image_threads: int
    lsh: tuple[int, int]

    def fingerprint(self, shard_sha256: str | None, start: int) -> str:
        """What a signals file is made from: the step's version, the input shard and where it starts, these options."""
        what = {"v": SIGNALS_VERSION, "sha256": shard_sha256, "start": start, "num_perm": NUM_PERM}
        return runner.fingerprint({**what, "image_root": self.image_root, "lsh": list(self.lsh)})


def caption_hash(caption: str) -> bytes:
    """Specification: 128-bit hash of the caption after whitespace and case normalisation (exact duplicates)."""
    import xxhash

    return xxhash.xxh3_128_digest(" ".join(caption.lower().split()).encode("utf-8", "surrogatepass"))


def caption_hashes(captions: pa.Array) -> list[bytes]:
    """caption_hash of every caption (Python's split/join is as fast as Arrow's kernels here)."""
    return [caption_hash(c) for c in captions.to_pylist()]


def path_hash(image: str) -> int:
    import xxhash

    return xxhash.xxh3_64_intdigest(image.encode("utf-8", "surrogatepass"))


def _u64(values: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    mask = None if valid is None else ~valid
    return pa.array(values.astype(np.uint64), pa.uint64(), mask=mask)


def caption_signals(table: pa.Table, lsh: tuple[int, int]) -> dict[str, Any]:
    """Text signals of every row: quality columns, caption hash, MinHash signature and band keys."""
    captions = table.column("caption").to_pylist()
    st = table.column("sentence_tokens").combine_chunks()
    q = quality.signals_batch(st, captions)
    return {**q, **dedup_signals(table, lsh)}


def dedup_signals(table: pa.Table, lsh: tuple[int, int]) -> dict[str, Any]:
    """The duplicate-finding signals of every row: caption hash, MinHash signature, (bands, rows) band keys."""
    st = table.column("sentence_tokens").combine_chunks()
    tokens, row_off, _, _ = quality.row_tokens(st)
    hashes, h_off = minhash.shingle_hashes(tokens, row_off)
    sigs = minhash.signatures(hashes, h_off)
    has_shingles = np.diff(h_off) > 0
    return {
        "caption_hash": caption_hashes(table.column("caption").combine_chunks()),
        "signatures": sigs,
        "bands": minhash.band_keys(sigs, *lsh),
        "has_shingles": has_shingles,
    }


TEXT_BATCH = 4096  # rows per caption-signal batch: the numpy intermediates are ~10 arrays of all tokens


def _batched_caption_signals(table: pa.Table, lsh: tuple[int, int]) -> dict[str, Any]:
    """caption_signals over slices of the shard, concatenated (worker memory bounded whatever the shard size)."""
    parts = [caption_signals(table.slice(i, TEXT_BATCH), lsh) for i in range(0, max(table.num_rows, 1), TEXT_BATCH)]
    if len(parts) == 1:
        return parts[0]
    out: dict[str, Any] = {}
    for k in parts[0]:
        if isinstance(parts[0][k], list):
            out[k] = [x for p in parts for x in p[k]]
        else:
            out[k] = np.concatenate([p[k] for p in parts])
    return out


def _coverage(images: list[str], facts: list[img.ImageFacts]) -> dict[str, dict[str, Any]]:
    groups: dict[str, dict[str, Any]] = {}
    for image, f in zip(images, facts):
        g = groups.setdefault(img.top_folder(image), {"counts": Counter(), "examples": {}})
        status = img.STATUS_NAMES[f.status]
        g["counts"][status] += 1
        if f.status in (img.MISSING, img.UNREADABLE):
            ex = g["examples"].setdefault(status, [])
            if len(ex) < EXAMPLES:
                ex.append(image)
    return {k: {"counts": dict(v["counts"]), "examples": v["examples"]} for k, v in sorted(groups.items())}


def image_signals(images: list[str], image_root: str, threads: int) -> tuple[list[img.ImageFacts], dict]:
    paths = [None if storage.is_url(i) else i for i in images]
    facts = img.image_facts_batch(paths, threads, root=image_root)
    return facts, _coverage(images, facts)


def score_signals(table: pa.Table, n: int) -> dict[str, pa.Array]:
    """The model-score signals of every row (null where the shard is not scored).

    `detail_grounding_max`: the highest sentence_grounding among the row's non-summary
    sentences, so `ungrounded_caption` (every non-summary sentence below T) is one comparison
    for any T; null when the row has no non-summary sentence or no grounding.
    """
    names = table.column_names
    clip = table.column("clip_score").combine_chunks().cast(pa.float32()) if "clip_score" in names else None
    best = np.full(n, np.nan, np.float32)
    if "sentence_grounding" in names and "summary_mask" in names:
        g = table.column("sentence_grounding").combine_chunks()
        m = table.column("summary_mask").combine_chunks()
        for i, (gs, ms) in enumerate(zip(g.to_pylist(), m.to_pylist())):
            if gs:
                detail = [x for x, s in zip(gs, ms or [False] * len(gs)) if not s]
                if detail:
                    best[i] = max(detail)
    return {
        "clip_score": clip if clip is not None else pa.nulls(n, pa.float32()),
        "detail_grounding_max": pa.array(best, pa.float32(), mask=np.isnan(best)),
    }


def compute(task: Task, params: SignalParams) -> dict[str, Any]:
    """Worker: the signals of one input shard (`task.work`, an input_folders.InputShard). Returns the sidecar."""
    shard = task.work
    present = set(storage.read_schema(shard.path).names)
    table = storage.read_table(shard.path, columns=INPUT_COLUMNS + [c for c in SCORE_COLUMNS if c in present])
    n = table.num_rows
    if n != shard.rows:
        from caption_debias.errors import UserError

        raise UserError(f"{shard.path}: holds {n} rows but its manifest says {shard.rows}")
    images = table.column("image").to_pylist()
    cols: dict[str, pa.Array] = {
        "order": pa.array(np.arange(shard.start, shard.start + n, dtype=np.int64)),
        "key": table.column("key").combine_chunks(),
    }
    image_key = [b"p" + path_hash(i).to_bytes(8, "little") for i in images]  # the same path is the same image
    coverage = None
    if params.image_root is not None:
        facts, coverage = image_signals(images, params.image_root, params.image_threads)
        image_key = [f.sha256 if f.status == img.OK else k for f, k in zip(facts, image_key)]
        ok = np.array([f.status == img.OK for f in facts], bool)
        cols["image_status"] = pa.array(np.array([f.status for f in facts], np.int8))
        cols["image_width"] = pa.array([f.width for f in facts], pa.int32())
        cols["image_height"] = pa.array([f.height for f in facts], pa.int32())
        cols["image_sha256"] = pa.array([f.sha256 if f.status == img.OK else None for f in facts], pa.binary(32))
        cols["image_phash"] = _u64(np.array([f.phash or 0 for f in facts], np.uint64), ok)
        cols["image_error"] = pa.array([f.error for f in facts], pa.string())
        cols["image_thumb"] = pa.array([f.thumb for f in facts], pa.binary())
    cols["image_key"] = pa.array(image_key, pa.binary())
    lsh = params.lsh
    text = _batched_caption_signals(table, lsh)
    cols["caption_hash"] = pa.array(text["caption_hash"], pa.binary(16))
    cols["caption_repetition"] = pa.array(text["caption_repetition"], pa.float32())
    cols["caption_repeated_sentences"] = pa.array(text["caption_repeated_sentences"], pa.int32())
    cols["caption_tail_loop"] = pa.array(text["caption_tail_loop"], pa.int32())
    cols["caption_truncated"] = pa.array(text["caption_truncated"], pa.bool_())
    cols.update(score_signals(table, n))
    for b in range(lsh[0]):
        cols[band_name(b)] = _u64(text["bands"][:, b] if n else np.zeros(0, np.uint64), text["has_shingles"])
    sig_bytes = np.ascontiguousarray(text["signatures"], np.uint32).tobytes()
    cols["signature"] = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(NUM_PERM * 4), n, [None, pa.py_buffer(sig_bytes)]
    )
    signals = pa.table(cols)
    path = signals_path(task.folder, task.index)
    side = {
        "index": task.index,
        "fingerprint": task.fingerprint,
        "rows": n,
        "sha256": write_shard(signals, path),
        "bytes": path.stat().st_size,
        "coverage": coverage,
    }
    write_json(side, task.sidecar_path)
    return side
