"""The map step: one input shard -> one signals file of per-row facts (no decisions yet).

Runs in a worker (process pool or Ray task). Writes OUT/.curate/signals/part-NNNNN.parquet
atomically and returns a small sidecar (rows, image coverage, fingerprint) that is also
saved for resume. Every value here depends on the row alone, so the shard can be redone in
any order on any worker.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa

from caption_debias import image_files, runner, storage
from caption_debias.curate import images as img
from caption_debias.curate import minhash, quality
from caption_debias.curate.options import NUM_PERM
from caption_debias.image_files import ImageProblem
from caption_debias.image_source import ImageCounts, ImageSource, Root
from caption_debias.runner import Task, part_name, write_json, write_shard
from caption_debias.score.options import GROUNDING_EPS

SIGNALS_VERSION = 6  # bump when a signal's definition changes: old signal files are then redone
SIGNALS_DIR = ".curate/signals"
INPUT_COLUMNS = ["key", "image", "caption", "sentence_tokens"]
SCORE_COLUMNS = ["clip_score", "sentence_grounding", "summary_mask", "image_embedding"]  # read when present
# What `caption-debias score` can write (docs/curation.md, "Invalid model signals"); anything else in a
# score column is an invalid signal: its row goes as invalid_signal and no other row sees the value.
CLIP_SCORE_MAX = 1.01  # clip_score is a cosine, |s| <= 1; the margin covers bf16 rounding
GROUNDING_MAX = 2.02 / GROUNDING_EPS  # (own - mean) / (std + eps): |own - mean| <= 2 bounds |g| by 2 / eps
EMBEDDING_NORM_TOLERANCE = 0.01  # image_embedding is L2-normalised (float16: norms within about 1e-3 of 1)
EXAMPLES = 3  # example paths per coverage group and status


def band_name(band: int) -> str:
    return f"band_{band:02d}"


def signals_name(index: int) -> str:
    return part_name(SIGNALS_DIR, index, ".parquet")


def signals_path(out: Path, index: int) -> Path:
    return out / signals_name(index)


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


def image_signals(
    images: list[str], keys: list[str], image_root: str, threads: int
) -> tuple[list[img.ImageFacts], dict, ImageCounts]:
    """The facts of every row's image under the root (resolved where typed: image_source.stage_root),
    read through one ImageSource: rows grouped by tar, each tar read once in member order. A URL
    row is looked up in img2dataset's output under the root when the root holds some (else not
    checked, as a root of loose files cannot hold it)."""
    source = ImageSource(Root(image_root, image_root), threads=threads)
    urls = [i for i, image in enumerate(images) if storage.is_url(image)]
    wanted: list[str | None] = list(images)
    if urls and source.downloads().shards == 0:
        for i in urls:
            wanted[i] = None
    facts = img.source_facts(source, wanted, keys)
    counts = ImageCounts()
    for image, f in zip(wanted, facts):
        if image is not None:
            counts.add(_as_result(f), image)
    return facts, _coverage(images, facts), counts


def _as_result(facts: img.ImageFacts) -> object:
    """What ImageCounts counts: the facts, or the ImageProblem of an image not found or not readable."""
    if facts.status == img.MISSING:
        return ImageProblem(image_files.MISSING, facts.error or "")
    if facts.status == img.UNREADABLE:
        return ImageProblem(image_files.UNREADABLE, facts.error or "")
    return facts


def _value(x: float) -> str:
    return "NaN" if math.isnan(x) else f"{x:g}"


def clip_score_problem(value: float | None) -> str | None:
    """Specification: why a row's clip_score cannot be used, or None (null: not scored, no problem)."""
    if value is None:
        return None
    if not math.isfinite(value) or abs(value) > CLIP_SCORE_MAX:
        return f"{_value(value)} is not a cosine (outside [-1, 1])"
    return None


def grounding_problem(grounding: list[float | None] | None, sentences: int) -> str | None:
    """Specification: why a row's sentence_grounding cannot be used, or None (null: not grounded).
    One value per sentence, each finite and within what the grounding rule can give; a null value
    is a sentence without grounding (kept, as before)."""
    if grounding is None:
        return None
    if len(grounding) != sentences:
        return f"{len(grounding)} values for {sentences} sentences"
    for i, g in enumerate(grounding):
        if g is not None and (not math.isfinite(g) or abs(g) > GROUNDING_MAX):
            return f"{_value(g)} at sentence {i + 1} (a grounding is a finite number within +-{GROUNDING_MAX:.3g})"
    return None


def embedding_problem(embedding: list[float | None] | None) -> str | None:
    """Specification: why a row's image_embedding cannot be used, or None (null: none kept).
    Every value finite and the vector of unit length (score writes L2-normalised embeddings)."""
    if embedding is None:
        return None
    for i, x in enumerate(embedding):
        if x is None or not math.isfinite(x):
            return f"{'null' if x is None else _value(x)} at value {i + 1}"
    values = cast("list[float]", embedding)  # no None past the loop above
    norm = math.sqrt(sum(float(x) * float(x) for x in values))
    if abs(norm - 1.0) > EMBEDDING_NORM_TOLERANCE:
        return f"length {norm:.4g}, not 1 (score writes unit-length embeddings)"
    return None


def _bad_values(values: pa.Array, limit: float) -> np.ndarray:
    """Per flat value: NaN, infinite or beyond +-limit (nulls are not bad)."""
    x = values.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls become NaN ...
    bad = ~(np.abs(x) <= limit)
    return bad & _valid(values)  # ... and are not bad


def _rows_with(flat_bad: np.ndarray, lists: pa.Array) -> np.ndarray:
    """Per row of a list array: does any of its values have `flat_bad` set? (flat over the non-null lists)"""
    ends = np.cumsum(_lengths(lists))
    counts = np.diff(np.concatenate([[0], np.cumsum(flat_bad)])[np.concatenate([[0], ends])])
    return counts > 0


def score_problems(table: pa.Table, n: int) -> dict[str, list[str | None]]:
    """Batched: each score column's problem per row (`clip_score_problem`, `grounding_problem`,
    `embedding_problem`), None for a valid row. Vectorised tests find the rows; the one-row rule
    words the (rare) problem."""
    import pyarrow.compute as pc

    names = table.column_names
    out: dict[str, list[str | None]] = {}
    if "clip_score" in names:
        clip = table.column("clip_score").combine_chunks()
        bad = _bad_values(clip, CLIP_SCORE_MAX)
        out["clip_score"] = [clip_score_problem(clip[i].as_py()) if b else None for i, b in enumerate(bad)]
    if "sentence_grounding" in names:
        g = table.column("sentence_grounding").combine_chunks()
        sentences = _lengths(table.column("sentence_tokens").combine_chunks())
        bad = _rows_with(_bad_values(pc.list_flatten(g), GROUNDING_MAX), g)
        bad |= _valid(g) & (_lengths(g) != sentences)
        out["sentence_grounding"] = [
            grounding_problem(g[i].as_py(), int(sentences[i])) if b else None for i, b in enumerate(bad)
        ]
    if "image_embedding" in names:
        e = table.column("image_embedding").combine_chunks()
        bad = bad_embeddings(e)
        out["image_embedding"] = [embedding_problem(e[i].as_py()) if b else None for i, b in enumerate(bad)]
    return out


def _valid(values: pa.Array) -> np.ndarray:
    return values.is_valid().to_numpy(zero_copy_only=False)


def _lengths(lists: pa.Array) -> np.ndarray:
    """Per row of a list array: its length (0 for a null list)."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)


def embedding_width(lengths: np.ndarray) -> int | None:
    """The length the usable embeddings share: the most common one (on a tie, the shorter), the
    model's width; a usable row of another length is an invalid signal. None without any."""
    if not len(lengths):
        return None
    values, counts = np.unique(lengths, return_counts=True)
    return int(values[np.argmax(counts)])


def bad_embeddings(e: pa.Array) -> np.ndarray:
    """Per row: an embedding with a null, NaN or infinite value, or not of unit length (sums of
    squares per row from one cumulative sum over the flat values)."""
    import pyarrow.compute as pc

    flat = pc.list_flatten(e)
    x = flat.to_numpy(zero_copy_only=False).astype(np.float64)
    bad = _rows_with(~np.isfinite(x) | ~_valid(flat), e)
    bounds = np.concatenate([[0], np.cumsum(_lengths(e))])
    squares = np.concatenate([[0.0], np.cumsum(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) ** 2)])
    norms = np.sqrt(np.diff(squares[bounds]))
    return bad | (_valid(e) & ~(np.abs(norms - 1.0) <= EMBEDDING_NORM_TOLERANCE))


def score_signals(table: pa.Table, n: int) -> dict[str, pa.Array]:
    """The model-score signals of every row (null where the shard is not scored).

    `detail_grounding_max`: the highest sentence_grounding among the row's non-summary
    sentences, so `ungrounded_caption` (every non-summary sentence below T) is one comparison
    for any T; null when the row has no non-summary sentence, no grounding or an invalid one.
    `<column>_problem`: why a row's clip_score, sentence_grounding or image_embedding cannot be
    used (score_problems), null when it can; `embedding_dim`: the image_embedding's length.
    """
    names = table.column_names
    clip = table.column("clip_score").combine_chunks().cast(pa.float32()) if "clip_score" in names else None
    problems = score_problems(table, n)
    best = np.full(n, np.nan, np.float32)
    if "sentence_grounding" in names and "summary_mask" in names:
        g = table.column("sentence_grounding").combine_chunks()
        m = table.column("summary_mask").combine_chunks()
        invalid = problems["sentence_grounding"]
        for i, (gs, ms) in enumerate(zip(g.to_pylist(), m.to_pylist())):
            if gs and invalid[i] is None:
                detail = [x for x, s in zip(gs, ms or [False] * len(gs)) if not s and x is not None]
                if detail:
                    best[i] = max(detail)
    out = {
        "clip_score": clip if clip is not None else pa.nulls(n, pa.float32()),
        "detail_grounding_max": pa.array(best, pa.float32(), mask=np.isnan(best)),
    }
    for column in PROBLEM_COLUMNS:
        out[problem_column(column)] = pa.array(problems.get(column, [None] * n), pa.string())
    if "image_embedding" in names:
        import pyarrow.compute as pc

        out["embedding_dim"] = pc.list_value_length(table.column("image_embedding").combine_chunks()).cast(pa.int32())
    else:
        out["embedding_dim"] = pa.nulls(n, pa.int32())
    return out


PROBLEM_COLUMNS = ("clip_score", "sentence_grounding", "image_embedding")  # the score columns curate reads


def problem_column(column: str) -> str:
    return f"{column}_problem"


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
    image_key: list[bytes | None] = [
        b"p" + path_hash(i).to_bytes(8, "little") for i in images
    ]  # the same path is the same image
    coverage, counts = None, None
    if params.image_root is not None:
        keys = table.column("key").to_pylist()
        facts, coverage, counts = image_signals(images, keys, params.image_root, params.image_threads)
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
        "images": None if counts is None else counts.as_dict(),
    }
    write_json(side, task.sidecar_path)
    return side
