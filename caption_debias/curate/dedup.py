"""The global step: every row's reason, decided in funnel order over the whole run.

Row-local reasons (image facts, quality signals) are thresholds on the signal columns.
Eval overlap compares every surviving row with the eval items (joins on exact hashes, on
perceptual-hash blocks and on LSH band keys; candidates verified). The duplicate reasons
follow the rule "removed when it matches an earlier row that is kept", which is sequential:
`reference_duplicates` states it as a loop over every row, `duplicates` computes the same
answer by first finding, with polars group-bys, the rows that share an exact key, a
perceptual-hash block or an LSH band with another surviving row (everything else is kept
without a look), then running that loop over those rows only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caption_debias.curate import images as img
from caption_debias.curate import minhash, quality
from caption_debias.curate.keys import KeyList
from caption_debias.curate.options import REASONS, CurateOptions
from caption_debias.curate.signals import band_name, embedding_width, problem_column
from caption_debias.engines import GroupBy
from caption_debias.engines.local import repeated_keys

CODE = {r: i for i, r in enumerate(REASONS)}
KEPT = -1


def phash_blocks(phash: np.ndarray, distance: int) -> list[np.ndarray]:
    """64-bit hashes within `distance` share at least one of distance + 1 blocks exactly
    (pigeonhole): the blocks are the buckets, every candidate is then checked in full."""
    blocks = distance + 1
    bits = [64 // blocks + (1 if b < 64 % blocks else 0) for b in range(blocks)]
    shifts = np.cumsum([0] + bits[:-1]).tolist()
    return [(phash >> np.uint64(s)) & np.uint64((1 << b) - 1) for s, b in zip(shifts, bits)]


def same_picture(phash_a: int, phash_b: int, thumb_a: bytes | None, thumb_b: bytes | None, distance: int) -> bool:
    """Specification of a perceptual match: phashes within `distance`, and, when both images are
    small or flat (both have a thumbnail), thumbnails that agree pixel by pixel."""
    if img.hamming(phash_a, phash_b) > distance:
        return False
    return thumb_a is None or thumb_b is None or img.thumbs_match(thumb_a, thumb_b)


@dataclass
class Decisions:
    reason: np.ndarray  # int8 per row: index into REASONS, or KEPT
    duplicate_count: np.ndarray  # int32 per row
    detail: dict[int, dict[str, Any]] = field(default_factory=dict)  # order -> detail (removed rows)
    ref: dict[int, int] = field(default_factory=dict)  # order -> order of the kept row it duplicates
    alignment: dict[str, Any] = field(default_factory=dict)  # low_alignment's run-wide facts (the top-P cut-off)
    kept_by_user: dict[str, Any] = field(default_factory=dict)  # --keep-keys: rows kept, what would have removed them
    unmasked: np.ndarray | None = None  # bool per row: listed by --keep-keys and kept, so never masked


# ---------------------------------------------------------------- the duplicate loop


@dataclass
class DupRow:
    """What the duplicate loop knows of one row (the specification's input)."""

    order: int
    image_key: bytes | None  # sha256 of the file, or the image path's hash without --image-root
    phash: int | None
    caption_hash: bytes
    signature: np.ndarray | None  # None: no tokens
    bands: np.ndarray | None  # LSH band keys of the signature
    thumb: bytes | None = None  # small or flat images: the thumbnail that confirms a phash match


def _best(matches: list[tuple]) -> tuple | None:
    return min(matches) if matches else None


def reference_duplicates(
    rows: list[DupRow], threshold: float, duplicate_images: bool, image_by: str, distance: int = 4
) -> dict[int, tuple[str, int, dict]]:
    """Specification: rows in input order; each is compared with every kept row before it
    (captions: every kept row that shares an LSH band with it, the candidates MinHash LSH gives).

    Returns order -> (reason, matched order, detail) for the removed rows.
    """
    kept: list[DupRow] = []
    removed: dict[int, tuple[str, int, dict]] = {}
    for r in rows:
        hit = None
        if duplicate_images and r.image_key is not None:
            same = [k.order for k in kept if k.image_key == r.image_key]
            if same:
                hit = ("duplicate_image", same[0], {"by": image_by, "similarity": 1.0})
            elif r.phash is not None:
                near = _best(
                    [
                        (img.hamming(r.phash, k.phash), k.order)
                        for k in kept
                        if k.phash is not None and same_picture(r.phash, k.phash, r.thumb, k.thumb, distance)
                    ]
                )
                if near:
                    hit = ("duplicate_image", near[1], _phash_detail(near[0]))
        if hit is None:
            same = [k.order for k in kept if k.caption_hash == r.caption_hash]
            if same:
                hit = ("duplicate_caption", same[0], {"by": "caption text", "similarity": 1.0})
        if hit is None and r.signature is not None:
            near = _best(
                [
                    (-j, k.order)
                    for k in kept
                    if k.signature is not None
                    and bool(np.any(k.bands == r.bands))  # an LSH candidate: shares a band
                    and (j := minhash.estimate(r.signature, k.signature)) >= threshold
                ]
            )
            if near:
                hit = ("near_duplicate_caption", near[1], {"by": "caption minhash", "similarity": -near[0]})
        if hit is None:
            kept.append(r)
        else:
            removed[r.order] = hit
    return removed


def _phash_detail(distance: int) -> dict[str, Any]:
    return {"by": "image phash", "hamming": int(distance), "similarity": round(1 - distance / 64, 4)}


# ---------------------------------------------------------------- helpers over signal files


class SignalTable:
    """The run's signal files read column by column (polars), rows indexed by global order."""

    def __init__(self, files: list[Path], n_rows: int):
        self.files = [str(f) for f in files]
        self.n = n_rows

    def scan(self):
        from caption_debias import storage

        return storage.scan_parquet(self.files)

    def collect(self, frame):
        """frame.collect(), a signals file that cannot be decoded named in one line."""
        from caption_debias import storage

        with storage.reading(self.files):
            return frame.collect()

    def column(self, name: str):
        import polars as pl

        if not self.files:
            return pl.Series(name, [])
        s = self.collect(self.scan().select(name)).to_series()
        assert len(s) == self.n, (name, len(s), self.n)
        return s

    def rows_where(self, orders: np.ndarray, columns: list[str]):
        """The given rows (sorted by order) with these columns."""
        import polars as pl

        if len(orders) == 0 or not self.files:
            return None
        wanted = pl.Series("order", np.unique(orders).astype(np.int64))
        return self.collect(self.scan().filter(pl.col("order").is_in(wanted.implode())).select(["order", *columns]))

    def signatures(self, orders: np.ndarray) -> dict[int, np.ndarray]:
        df = self.rows_where(orders, ["signature"])
        if df is None:
            return {}
        return {int(o): np.frombuffer(s, np.uint32) for o, s in zip(df["order"].to_list(), df["signature"].to_list())}


def _np(series, dtype=None, fill=None) -> np.ndarray:
    if fill is not None:
        series = series.fill_null(fill)
    arr = series.to_numpy()
    return arr.astype(dtype) if dtype is not None else arr


def _buckets(shared, alive_mask: np.ndarray, family: int):
    """(order, family, bucket) of the rows still alive that share a key with another alive row."""
    import polars as pl

    df = shared.filter(pl.Series(alive_mask[shared["order"].to_numpy()]))
    df = df.filter(pl.len().over("key") >= 2)
    return df.select(
        "order", pl.lit(family, pl.Int16).alias("family"), pl.col("key").rank("dense").cast(pl.Int64).alias("bucket")
    )


# ---------------------------------------------------------------- the decisions


def low_alignment(
    clip: np.ndarray, min_score: float | None, keep_top: float | None, counted: np.ndarray | None = None
) -> tuple[np.ndarray, dict]:
    """Rows removed as low_alignment (NaN = no score: removed when a rule is on) and the run-wide facts.

    --keep-top-alignment P keeps the ceil(P% of all rows) best scores over the whole input
    (DataComp's rule, before any other reason), ties broken by input order. Rows outside
    `counted` (an invalid clip_score: invalid_signal) are neither ranked nor counted in "all rows",
    so such a row never moves the cut-off of another.
    """
    n = len(clip)
    low = np.zeros(n, bool)
    facts: dict[str, Any] = {}
    if min_score is not None:
        low |= ~(clip >= min_score)
        facts["min_clip_score"] = min_score
    if keep_top is not None:
        rows = np.arange(n) if counted is None else np.flatnonzero(counted)
        scores = clip[rows]
        keep = int(np.ceil(keep_top * len(rows) / 100 - 1e-9))
        rank = rows[np.lexsort((rows, np.where(np.isnan(scores), np.inf, -scores.astype(np.float64))))]
        top = np.zeros(n, bool)
        top[rank[:keep]] = True
        low |= ~top
        facts["keep_top_alignment"] = keep_top
        facts["kept_by_rank"] = keep
        if keep:
            facts["cutoff"] = round(float(clip[rank[keep - 1]]), 6)
    return low, facts


def signal_columns(options: CurateOptions, embeddings: bool) -> list[str]:
    """The score columns this run's flags read (curate checks only those: docs/curation.md)."""
    columns = []
    if options.min_clip_score is not None or options.keep_top_alignment is not None:
        columns.append("clip_score")
    if options.drop_ungrounded is not None:
        columns.append("sentence_grounding")
    if options.semantic_duplicate_threshold is not None and embeddings:
        columns.append("image_embedding")
    return columns


def invalid_signals(table: SignalTable, columns: list[str]) -> dict[int, dict[str, str]]:
    """order -> {column, problem} of every row whose value in one of `columns` cannot be used (the
    first such column): its own problem from the signals step, and for image_embedding a length
    other than the one most embeddings of the input have (the model's width; on a tie, the shorter)."""
    found: dict[int, dict[str, str]] = {}
    for column in columns:
        problems = table.column(problem_column(column))
        for o in np.flatnonzero(_np(problems.is_not_null(), bool)).tolist():
            found.setdefault(o, {"column": column, "problem": problems[o]})
        if column == "image_embedding":
            dim = _np(table.column("embedding_dim"), np.int64, -1)
            usable = (dim >= 0) & _np(problems.is_null(), bool)
            width = embedding_width(dim[usable])
            if width is not None:
                for o in np.flatnonzero(usable & (dim != width)).tolist():
                    found.setdefault(o, {"column": column, "problem": f"{dim[o]} values, the input's others {width}"})
    return found


def decide(
    table: SignalTable,
    options: CurateOptions,
    ev=None,
    images: bool = False,
    shared_keys: GroupBy = repeated_keys,
    embeddings=None,
    thumbs=None,
    key_lists: dict[str, KeyList] | None = None,
) -> Decisions:
    """Every row's reason. `shared_keys(files, columns)` finds rows with a repeated key (the engines' key
    group-by: `engines.repeated_keys(options)`, polars here, tasks on Ray); `embeddings(orders)` gives (orders that have one, float16 matrix) for SemDeDup;
    `thumbs(orders)` the thumbnails of large flat pictures whose phash matched (images.LATER);
    `key_lists` the run's one reading of its key files (read here when not given)."""
    n = table.n
    reason = np.full(n, KEPT, np.int8)
    d = Decisions(reason, duplicate_count=np.zeros(n, np.int32))
    if n == 0:  # inputs without rows (every record was a prepare reject): nothing to decide
        return d

    def remove(mask: np.ndarray, name: str) -> None:
        reason[mask & (reason == KEPT)] = CODE[name]

    # Row-local reasons carry no detail here: the write step reads it from the row's own signals.
    if images:
        status = _np(table.column("image_status"), np.int8)
        remove(status == img.MISSING, "image_missing")
        remove(status == img.UNREADABLE, "image_unreadable")
        width = _np(table.column("image_width"), np.int64, 0)
        height = _np(table.column("image_height"), np.int64, 0)
        remove((status == img.OK) & (np.minimum(width, height) < options.min_image_side), "image_too_small")
        del status, width, height
    thumbs = _ThumbCache(thumbs)
    if ev is not None:
        _eval_overlap(table, ev, reason, d, images, options, thumbs)
    rep = _np(table.column("caption_repetition"), np.float32)
    rsent = _np(table.column("caption_repeated_sentences"), np.int32)
    loop = _np(table.column("caption_tail_loop"), np.int32)
    remove(
        quality.is_repetitive(rep, rsent, loop, options.repetition_max, options.repeated_sentences_max),
        "repetitive_caption",
    )
    del rep, rsent, loop
    remove(_np(table.column("caption_truncated"), bool), "truncated_caption")
    invalid = invalid_signals(table, signal_columns(options, embeddings is not None))
    for o, detail in invalid.items():  # row-local: the value is then seen by no other step
        if reason[o] == KEPT:
            reason[o] = CODE["invalid_signal"]
            d.detail[o] = detail
    if options.min_clip_score is not None or options.keep_top_alignment is not None:
        clip = _np(table.column("clip_score"), np.float32, float("nan"))
        counted = _np(table.column(problem_column("clip_score")).is_null(), bool)
        low, d.alignment = low_alignment(clip, options.min_clip_score, options.keep_top_alignment, counted)
        remove(low, "low_alignment")
        del clip, low
    if options.drop_ungrounded is not None:
        best = _np(table.column("detail_grounding_max"), np.float32, float("nan"))
        remove(best < options.drop_ungrounded, "ungrounded_caption")  # NaN (no detail sentence): kept
        del best
    _duplicates(table, options, reason, d, images, shared_keys, thumbs)
    if options.semantic_duplicate_threshold is not None and embeddings is not None:
        from caption_debias.curate import semdedup

        orders, emb = embeddings(np.flatnonzero(reason == KEPT))
        if options.semantic_duplicate_center:
            emb = semdedup.centred(emb, out=emb if emb.flags.writeable else None)
        for o, (ref, cos) in semdedup.semantic_duplicates(emb, orders, options.semantic_duplicate_threshold).items():
            reason[o] = CODE["semantic_duplicate"]
            d.ref[o] = ref
            d.detail[o] = {
                "by": "image embedding, centred" if options.semantic_duplicate_center else "image embedding",
                "similarity": round(cos, 4),
            }
    _user_choices(table, options, key_lists, reason, d)
    counts = np.zeros(n, np.int32)
    if d.ref:
        np.add.at(counts, np.fromiter(d.ref.values(), np.int64, len(d.ref)), 1)
    d.duplicate_count = counts
    return d


def _user_choices(
    table: SignalTable, options: CurateOptions, key_lists: dict[str, KeyList] | None, reason: np.ndarray, d: Decisions
) -> None:
    """The curator's key files, after every other reason: --exclude-keys / --include-keys, then --keep-keys."""
    if options.exclude_keys is None and options.include_keys is None and options.keep_keys is None:
        return
    given = options.key_lists() if key_lists is None else key_lists
    _user_keys(table, given, reason, d)
    if "keep" in given:
        _kept_by_user(table, given["keep"], reason, d)


def _user_keys(table: SignalTable, given: dict[str, KeyList], reason: np.ndarray, d: Decisions) -> None:
    """The funnel's last step: rows every other reason kept that --exclude-keys lists or --include-keys
    does not (curate/keys.py). Last, so the output is the same run's less exactly those rows."""
    from caption_debias.curate import keys

    by_exclude, by_include = keys.excluded(table.column("key"), given.get("exclude"), given.get("include"))
    for mask, role in ((by_exclude, "exclude"), (by_include, "include")):
        rows = np.flatnonzero(mask & (reason == KEPT))
        reason[rows] = CODE["excluded_by_user"]
        if len(rows):
            why = keys.detail(given[role])
            d.detail.update(dict.fromkeys(rows.tolist(), why))


def _kept_by_user(table: SignalTable, keep: KeyList, reason: np.ndarray, d: Decisions) -> None:
    """--keep-keys, after every reason: a listed row stays whatever removed it (but a missing or
    unreadable image), counted by the reason it overrode; a duplicate kept this way no longer counts
    toward the row it matched."""
    from caption_debias.curate import keys

    listed = keys.listed(table.column("key"), keep)
    unkeepable = np.isin(reason, [CODE[r] for r in keys.UNKEEPABLE])
    rescued = np.flatnonzero(listed & (reason != KEPT) & ~unkeepable)
    overrode = Counter(REASONS[int(reason[o])] for o in rescued)
    reason[rescued] = KEPT
    for o in rescued.tolist():
        d.ref.pop(o, None)
        d.detail.pop(o, None)
    not_kept = Counter(REASONS[int(r)] for r in reason[listed & unkeepable])
    d.unmasked = listed & (reason == KEPT)
    d.kept_by_user = {
        "rows": int(d.unmasked.sum()),
        "overrode": {r: overrode[r] for r in REASONS if overrode.get(r)},
        "not_kept": {r: not_kept[r] for r in REASONS if not_kept.get(r)},
    }


class _ThumbCache:
    """Thumbnails by order: stored ones as they are, LATER ones made once by the loader when asked."""

    def __init__(self, loader):
        self.loader, self.made = loader, {}

    def resolve(self, o: int, stored: bytes | None) -> bytes | None:
        if stored != img.LATER:
            return stored
        if o not in self.made:
            if self.loader is None:
                return None  # no image folder to read it from: the phash alone decides
            self.made.update(self.loader(np.array([o], np.int64)))
        return self.made.get(o)


def _eval_overlap(
    table: SignalTable, ev, reason: np.ndarray, d: Decisions, images: bool, options: CurateOptions, thumbs
) -> None:
    import polars as pl

    threshold = options.near_duplicate_threshold
    alive = np.flatnonzero(reason == KEPT)
    found: dict[int, dict[str, Any]] = {}

    def note(o: int, detail: dict[str, Any], rank: tuple) -> None:
        old = found.get(o)
        if old is None or rank < old["_rank"]:
            found[o] = {**detail, "_rank": rank}

    if images and ev.image_sha256:
        sha = table.column("image_sha256")
        train = pl.DataFrame({"order": np.arange(table.n), "sha": sha})[alive]
        evdf = pl.DataFrame({"sha": pl.Series(ev.image_sha256, dtype=pl.Binary), "e": np.arange(len(ev.image_sha256))})
        for o, e in train.join(evdf, on="sha").select("order", "e").iter_rows():
            note(o, {"match": ev.image_labels[e], "by": "image sha256", "similarity": 1.0}, (0, 0, e))
        del sha, train
        ph = table.column("image_phash")
        valid = ~_np(ph.is_null(), bool)
        rows = alive[valid[alive]]
        phash = _np(ph, np.uint64, 0)[rows]
        ev_phash = np.array(ev.image_phash, np.uint64)
        distance = options.duplicate_image_distance
        stored = table.rows_where(rows, ["image_thumb"]) if len(rows) else None
        thumb_of = dict(zip(stored["order"].to_list(), stored["image_thumb"].to_list())) if stored is not None else {}
        for tb, eb in zip(phash_blocks(phash, distance), phash_blocks(ev_phash, distance)):
            pairs = pl.DataFrame({"i": np.arange(len(rows)), "b": tb}).join(
                pl.DataFrame({"e": np.arange(len(ev_phash)), "b": eb}), on="b"
            )
            if pairs.height:
                i, e = pairs["i"].to_numpy(), pairs["e"].to_numpy()
                dist = np.bitwise_count(phash[i] ^ ev_phash[e])
                close = dist <= distance
                for ii, ee, dd in zip(i[close], e[close], dist[close]):
                    a, b = thumbs.resolve(int(rows[ii]), thumb_of.get(int(rows[ii]))), ev.image_thumb[ee]
                    if a is not None and b is not None and not img.thumbs_match(a, b):
                        continue  # two small or flat pictures the phash alone cannot tell apart
                    note(int(rows[ii]), {"match": ev.image_labels[ee], **_phash_detail(int(dd))}, (1, int(dd), int(ee)))
    if ev.caption_hashes:
        ch = table.column("caption_hash")
        train = pl.DataFrame({"order": np.arange(table.n), "h": ch})[alive]
        evdf = pl.DataFrame(
            {"h": pl.Series(ev.caption_hashes, dtype=pl.Binary), "e": np.arange(len(ev.caption_hashes))}
        )
        for o, e in train.join(evdf, on="h").select("order", "e").iter_rows():
            note(o, {"match": ev.caption_labels[e], "by": "caption text", "similarity": 1.0}, (2, 0, e))
        del ch, train
        cand = []
        for b in range(options.lsh()[0]):
            col = table.column(band_name(b))
            train = pl.DataFrame({"order": np.arange(table.n), "k": col})[alive].drop_nulls("k")
            evdf = pl.DataFrame({"k": ev.bands[:, b], "e": np.arange(len(ev.bands))})
            cand.append(train.join(evdf, on="k").select("order", "e"))
        pairs = pl.concat(cand).unique().sort("order", "e")
        if pairs.height:
            sigs = table.signatures(pairs["order"].to_numpy())
            for o, e in pairs.iter_rows():
                j = minhash.estimate(sigs[o], ev.signatures[e])
                if j >= threshold:
                    note(o, {"match": ev.caption_labels[e], "by": "caption minhash", "similarity": j}, (3, -j, e))
    for o in sorted(found):
        detail = found[o]
        detail.pop("_rank")
        reason[o] = CODE["eval_overlap"]
        d.detail[o] = detail


def _duplicates(
    table: SignalTable,
    options: CurateOptions,
    reason: np.ndarray,
    d: Decisions,
    images: bool,
    shared_keys,
    thumbs: _ThumbCache,
) -> None:
    """The duplicate reasons: the rows that share a key with another alive row, then the "earlier kept row" loop over them."""
    involved, phash = _involved(table, options, reason == KEPT, images, shared_keys)
    if involved.height == 0:
        return
    match = _Matcher.over(table, options, involved, phash, thumbs, images)
    kept_in: dict[tuple[int, int], list[int]] = {}  # (family, bucket) -> kept orders
    row_buckets: dict[int, list[tuple[int, int]]] = {}
    for o, f, bkt in involved.iter_rows():
        row_buckets.setdefault(o, []).append((f, bkt))
    for o in sorted(row_buckets):
        buckets = row_buckets[o]
        hit = match.image(o, buckets, kept_in) or match.caption(o, buckets, kept_in)
        if hit is None:
            for key in buckets:
                kept_in.setdefault(key, []).append(o)
        else:
            name, ref, detail = hit
            reason[o] = CODE[name]
            d.ref[o] = ref
            d.detail[o] = detail


def _involved(table: SignalTable, options: CurateOptions, alive_mask: np.ndarray, images: bool, shared_keys):
    """(order, family, bucket) of the alive rows that share a key with another, and the phash by order (or None).

    Families: 0 image key, 1..BLOCKS phash blocks, BLOCKS+1 caption hash, then one per band."""
    import polars as pl

    duplicate_images = not options.keep_duplicate_images
    distance = options.duplicate_image_distance
    blocks = distance + 1
    parts = []
    phash = None
    bands = [band_name(b) for b in range(options.lsh()[0])]
    shared = shared_keys(table.files, (["image_key"] if duplicate_images else []) + ["caption_hash", *bands])
    if duplicate_images:
        parts.append(_buckets(shared.pop("image_key"), alive_mask, 0))
        if images:
            ph = table.column("image_phash")
            valid = ~_np(ph.is_null(), bool)
            phash_all = _np(ph, np.uint64, 0)
            rows = np.flatnonzero(alive_mask & valid)
            for b, block in enumerate(phash_blocks(phash_all[rows], distance)):
                same_block = pl.DataFrame({"order": rows, "key": block}).filter(pl.len().over("key") >= 2)
                parts.append(_buckets(same_block, alive_mask, 1 + b))
            phash = {int(o): int(phash_all[o]) for o in rows.tolist()}
            del phash_all
    parts.append(_buckets(shared.pop("caption_hash"), alive_mask, blocks + 1))
    for b, name in enumerate(bands):
        parts.append(_buckets(shared.pop(name), alive_mask, blocks + 2 + b))
    return pl.concat(parts).sort("order", "family"), phash


@dataclass
class _Matcher:
    """The earlier kept row a row duplicates, if any: by image (key, then phash), then by caption (hash, then MinHash)."""

    options: CurateOptions
    blocks: int
    image_by: str
    phash: dict[int, int] | None
    thumb: dict[int, bytes | None]
    sigs: dict[int, np.ndarray]
    thumbs: _ThumbCache

    @classmethod
    def over(cls, table: SignalTable, options: CurateOptions, involved, phash, thumbs: _ThumbCache, images: bool):
        blocks = options.duplicate_image_distance + 1
        orders = involved["order"].to_numpy()
        family = involved["family"].to_numpy()
        sigs = table.signatures(orders[family >= blocks + 2])
        thumb: dict[int, bytes | None] = {}
        if phash is not None:
            th = table.rows_where(orders[(family >= 1) & (family <= blocks)], ["image_thumb"])
            if th is not None:
                thumb = dict(zip(th["order"].to_list(), th["image_thumb"].to_list()))
        image_by = "image sha256" if images else "image path"
        return cls(options, blocks, image_by, phash, thumb, sigs, thumbs)

    def image(self, o: int, buckets: list[tuple[int, int]], kept_in: dict) -> tuple | None:
        if self.options.keep_duplicate_images:
            return None
        for f, bkt in buckets:
            if f == 0 and kept_in.get((f, bkt)):
                return ("duplicate_image", kept_in[(f, bkt)][0], {"by": self.image_by, "similarity": 1.0})
        phash, distance = self.phash, self.options.duplicate_image_distance
        if phash is None or o not in phash:
            return None
        cands = {k for f, bkt in buckets if 1 <= f <= self.blocks for k in kept_in.get((f, bkt), ())}
        near = _best(
            [
                (img.hamming(phash[o], phash[k]), k)
                for k in cands
                if img.hamming(phash[o], phash[k]) <= distance
                and same_picture(phash[o], phash[k], self._thumb(o), self._thumb(k), distance)
            ]
        )
        return ("duplicate_image", near[1], _phash_detail(near[0])) if near else None

    def _thumb(self, o: int) -> bytes | None:
        return self.thumbs.resolve(o, self.thumb.get(o))

    def caption(self, o: int, buckets: list[tuple[int, int]], kept_in: dict) -> tuple | None:
        for f, bkt in buckets:
            if f == self.blocks + 1 and kept_in.get((f, bkt)):
                return ("duplicate_caption", kept_in[(f, bkt)][0], {"by": "caption text", "similarity": 1.0})
        if o not in self.sigs:
            return None
        cands = {k for f, bkt in buckets if f >= self.blocks + 2 for k in kept_in.get((f, bkt), ())}
        sig, threshold = self.sigs[o], self.options.near_duplicate_threshold
        near = _best([(-j, k) for k in cands if (j := minhash.estimate(sig, self.sigs[k])) >= threshold])
        if near:
            return ("near_duplicate_caption", near[1], {"by": "caption minhash", "similarity": -near[0]})
        return None
