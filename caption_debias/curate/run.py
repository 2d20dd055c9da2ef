"""curate(): input folders -> signals (parallel) -> decisions (global) -> curated shards (parallel) -> manifest.

Resumable like prepare: every finished shard of each parallel step leaves a sidecar with a
fingerprint of what it was made from; a rerun with the same inputs and options reuses each
one that matches. The decisions are recomputed from the signal files on every run (cheap,
and they depend on every row, so nothing partial of them is ever trusted).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa

from caption_debias import engines, image_files, storage
from caption_debias.curate import dedup, keys, signals, writer
from caption_debias.curate.options import CurateOptions
from caption_debias.dataset import MANIFEST, folder_file
from caption_debias.errors import UserError
from caption_debias.image_files import ImageProblem
from caption_debias.image_source import ImageCounts, ImageSource, Root, check_missing, no_root_line
from caption_debias.image_source.stage import record, stage_root
from caption_debias.input_folders import Inputs, Tally, open_inputs
from caption_debias.progress import Progress, say
from caption_debias.runner import (
    SHARDS_DIR,
    StageFolder,
    Task,
    part_name,
    run_tasks,
    stage_run,
    write_json,
)

REMOVED = "removed.jsonl"
STATE_DIR = ".curate"


def stage_folder(out: Path) -> StageFolder:
    """OUT as the stage runner sees it: what curate owns there, its state folder and step folders."""
    return StageFolder(
        out,
        "curate",
        state_dir=STATE_DIR,
        owned=(MANIFEST, REMOVED, SHARDS_DIR),
        subdirs=(SHARDS_DIR, signals.SIGNALS_DIR, writer.WRITE_DIR),
        work=(f"{signals.SIGNALS_DIR}/part-*.parquet",),  # the signals are the costly part
        verb="curated",
    )


def _one_tokenizer(name: str, tok: str, first: str) -> None:
    """Every input made with the same tokenizer: one output folder holds one kind of token ids."""
    if tok != first:
        raise UserError(f"{name}: made with tokenizer {tok!r}, the first input with another; curate them apart")


def _open_inputs(folders: Sequence[str | Path], out: Path) -> Inputs:
    return open_inputs(folders, out, tokenizer_rule=_one_tokenizer)


def _signal_tasks(inputs: Inputs, out: Path, params: signals.SignalParams) -> Iterator[Task]:
    for s in inputs.shards:
        fp = params.fingerprint(s.sha256, s.start)
        yield Task(
            s.index, str(out), fp, part_name(signals.SIGNALS_DIR, s.index), work=s, output=signals.signals_name(s.index)
        )


def _write_tasks(
    inputs: Inputs, out: Path, decisions: dict, sides: list[dict[str, Any]], params: writer.WriteParams
) -> Iterator[Task]:
    for s, sig_side in zip(inputs.shards, sides):
        removed, dup = decisions["removed"].get(s.index, {}), decisions["duplicate_count"].get(s.index, {})
        work = writer.ShardWrite(
            shard=s,
            signals=str(signals.signals_path(out, s.index)),
            signals_sha256=sig_side["sha256"],
            removed={str(k): v for k, v in removed.items()},
            duplicate_count={str(k): v for k, v in dup.items()},
            unmasked=tuple(decisions["unmasked"].get(s.index, ())),
        )
        fp = writer.fingerprint(work, params)
        yield Task(s.index, str(out), fp, writer.sidecar_name(s.index), work=work, verify_digest=True)


def _run_signals(folder: StageFolder, inputs: Inputs, options: CurateOptions) -> tuple[list[dict[str, Any]], int]:
    """The map step over every input shard: (the signals sidecars in shard order, how many were reused)."""
    params = signals.SignalParams(options.image_root, options.image_threads, options.lsh())
    progress = Progress("curate signals", "rows", inputs.rows, quiet=options.quiet, interval=options.log_interval)
    sides: list[dict[str, Any]] = []
    done: Counter[str] = Counter()

    def on_side(task: Task, side: dict[str, Any]) -> None:
        sides.append(side)
        done["rows"] += side["rows"]
        progress.update(done["rows"], extra=f"{len(sides)} of {len(inputs.shards)} shards")

    fn = partial(signals.compute, params=params)
    tasks = _signal_tasks(inputs, folder.out, params)
    reused = run_tasks(folder, tasks, fn, engines.mapper(options), on_side, progress)
    return sides, reused


def _run_writes(
    folder: StageFolder, inputs: Inputs, options: CurateOptions, decisions: dict, sig_sides: list, scored_removed: list
) -> tuple[Tally, list, int]:
    """The write step over every input shard, removed.jsonl in input order: (what the sidecars add up to, each
    shard's sentence_keep counts, how many were reused)."""
    params = writer.WriteParams(
        options.image_root, options.embed_images, decisions["alignment"], options.drop_ungrounded
    )
    tally, masks = Tally(inputs), []
    total = inputs.rows + len(scored_removed)  # the rows read: those scoring removed too
    progress = Progress("curate write", "rows", total, quiet=options.quiet, interval=options.log_interval)
    with folder.partial_lines(REMOVED) as removed_out:  # removed.jsonl appears whole or not at all
        # rows the scoring could not encode (their image): read and removed
        tally.add_removed_before(inputs.folders[0]["path"], scored_removed)
        removed_out.write_all(scored_removed)

        def on_side(task: Task, side: dict[str, Any]) -> None:
            tally.add(task.work.shard, side)
            masks.append(side.get("sentence_keep"))
            removed_out.write_all(side["removed"])
            progress.update(tally.read, extra=f"{len(tally.shards)} shards")

        fn = partial(writer.write, params=params)
        tasks = _write_tasks(inputs, folder.out, decisions, sig_sides, params)
        reused = run_tasks(folder, tasks, fn, engines.mapper(options), on_side, progress)
    return tally, masks, reused


def _decide(
    inputs: Inputs, out: Path, options: CurateOptions, ev, key_lists: dict[str, keys.KeyList] | None = None
) -> tuple[dict, dedup.Decisions]:
    """Decisions per shard: {index: {local row: [reason code, detail]}}, plus duplicate counts."""
    import numpy as np

    table = dedup.SignalTable([signals.signals_path(out, s.index) for s in inputs.shards], inputs.rows)
    embeddings = None
    if options.semantic_duplicate_threshold is not None:
        embeddings = partial(image_embeddings, inputs)
    thumbs = partial(image_thumbs, inputs, options.image_root) if options.image_root is not None else None
    d = dedup.decide(
        table,
        options,
        ev,
        images=options.image_root is not None,
        shared_keys=engines.repeated_keys(options),
        embeddings=embeddings,
        thumbs=thumbs,
        key_lists=key_lists,
    )
    refs = np.fromiter(set(d.ref.values()), np.int64)
    matched = table.rows_where(refs, ["key"]) if len(refs) else None
    key_of = dict(zip(matched["order"].to_list(), matched["key"].to_list())) if matched is not None else {}
    starts = np.array([s.start for s in inputs.shards], np.int64)
    removed: dict[int, dict[int, list]] = {}
    for o in np.flatnonzero(d.reason != dedup.KEPT).tolist():
        shard = int(np.searchsorted(starts, o, side="right") - 1)
        detail = dict(d.detail.get(o, {}))
        if o in d.ref:
            detail = {"match": key_of[d.ref[o]], **detail}
        removed.setdefault(shard, {})[o - int(starts[shard])] = [int(d.reason[o]), detail]
    dup: dict[int, dict[int, int]] = {}
    for o in np.flatnonzero(d.duplicate_count).tolist():
        shard = int(np.searchsorted(starts, o, side="right") - 1)
        dup.setdefault(shard, {})[o - int(starts[shard])] = int(d.duplicate_count[o])
    unmasked: dict[int, list[int]] = {}
    for o in np.flatnonzero(d.unmasked).tolist() if d.unmasked is not None else []:
        shard = int(np.searchsorted(starts, o, side="right") - 1)
        unmasked.setdefault(shard, []).append(o - int(starts[shard]))
    decided = {"removed": removed, "duplicate_count": dup, "alignment": d.alignment, "unmasked": unmasked}
    return {**decided, "kept_by_user": d.kept_by_user}, d


SCORED_DIR = "scored"  # OUT/.curate/scored: the inputs scored by --score-model (resumable like any score run)


def _score_first(given: Sequence[str | Path], out: Path, options: CurateOptions) -> tuple[Inputs, list[dict[str, Any]]]:
    """--score-model: score the inputs into OUT/.curate/scored, then curate that folder.

    Returns its inputs and the rows scoring removed (image_missing / image_unreadable lines,
    which curate reports as its own: the input rows it read and removed).
    """
    from caption_debias.score.options import ScoreOptions
    from caption_debias.score.run import score_folder

    assert options.score_model is not None  # called for --score-model only
    scored = out / STATE_DIR / SCORED_DIR
    score_folder(
        [str(g) for g in given],
        scored,
        ScoreOptions(
            model=options.score_model,
            pretrained=options.score_pretrained,
            image_root=options.image_root,
            device=options.score_device,
            keep_embeddings=options.semantic_duplicate_threshold is not None,
            workers=options.workers,
            quiet=options.quiet,
            max_missing_images=options.max_missing_images,
        ),
    )
    path = folder_file(scored, REMOVED)
    lines = [json.loads(x) for x in path.read_text("utf-8").splitlines()] if path.is_file() else []
    return _open_inputs([scored], out), lines


def image_thumbs(inputs: Inputs, image_root: str, orders: np.ndarray) -> dict[int, bytes]:
    """The thumbnails (images.thumb_of_bytes) of these rows' images, read again from the image root
    through one ImageSource (a shard's rows grouped by tar, each tar read once)."""
    from caption_debias.curate import images as img

    out, source = {}, ImageSource(Root(image_root, image_root))
    for s in inputs.shards:
        local = orders[(orders >= s.start) & (orders < s.start + s.rows)] - s.start
        if len(local) == 0:
            continue
        part = storage.read_table(s.path, columns=["key", "image"]).take(pa.array(local))
        images, keys = part.column("image").to_pylist(), part.column("key").to_pylist()
        for o, thumb in zip((local + s.start).tolist(), source.map(images, img.thumb_of_bytes, keys)):
            if isinstance(thumb, bytes):  # else changed since its signals were taken: the phash alone decides
                out[o] = thumb
    return out


def image_embeddings(inputs: Inputs, orders: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(orders that have an image embedding, their embeddings as one float16 matrix), read shard by shard."""
    import pyarrow.compute as pc

    got_orders, parts = [], []
    dim = None
    for s in inputs.shards:
        local = orders[(orders >= s.start) & (orders < s.start + s.rows)] - s.start
        if len(local) == 0:
            continue
        col = storage.read_table(s.path, columns=["image_embedding"]).column("image_embedding").combine_chunks()
        col = col.take(pa.array(local))
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        col = col.filter(pa.array(valid))
        lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
        if len(lengths):
            if dim is None:
                dim = int(lengths[0])
            if (lengths != dim).any():
                raise UserError(
                    f"{s.path}: image_embedding lengths differ ({dim} and {int(lengths[lengths != dim][0])})"
                )
            parts.append(pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float16).reshape(-1, dim))
            got_orders.append(local[valid] + s.start)
    if not parts:
        return np.zeros(0, np.int64), np.zeros((0, 0), np.float16)
    return np.concatenate(got_orders).astype(np.int64), np.concatenate(parts)


def require_scores(inputs: Inputs, options: CurateOptions) -> None:
    """A flag that reads model scores on a folder without them fails here, in one line, before any work."""
    for column, flag in options.scores_needed().items():
        for f in inputs.folders:
            shard = next((s for s in inputs.shards if s.folder == f["path"] and s.rows), None)
            if shard is None:
                continue
            present = column in storage.read_schema(shard.path).names
            if present and storage.read_table(shard.path, columns=[column]).column(column).null_count < shard.rows:
                continue
            how = (
                "`caption-debias score --keep-embeddings`" if column == "image_embedding" else "`caption-debias score`"
            )
            what = (
                "was scored without --keep-embeddings"
                if column == "image_embedding" and _scored(shard.path)
                else "has no model scores"
            )
            raise UserError(f"{flag} needs {column}, but {f['path']} {what}; run {how} on it first")


def _scored(path) -> bool:
    if "clip_score" not in storage.read_schema(path).names:
        return False
    col = storage.read_table(path, columns=["clip_score"]).column("clip_score")
    return col.null_count < len(col)


def _image_counts(sides: list[dict], scored_removed: Sequence[dict[str, Any]] = ()) -> ImageCounts:
    """The images the signal step looked for, in shard order, plus those --score-model's scoring
    found missing or unreadable (its rows never reach the signal step)."""
    counts = ImageCounts()
    for line in scored_removed:
        if line["reason"] in (image_files.MISSING, image_files.UNREADABLE):
            detail = (line.get("detail") or {}).get("error") or ""
            counts.add(ImageProblem(line["reason"], str(detail)), line["image"])
    for side in sides:
        if side.get("images"):
            counts = counts.merge(ImageCounts.from_dict(side["images"]))
    return counts


def _merge_coverage(sides: list[dict], scored_removed: Sequence[dict[str, Any]] = ()) -> dict[str, Any] | None:
    """Image coverage per top folder: the signal step's, plus the rows --score-model's scoring
    found missing or unreadable (curate never sees them, but read them all the same)."""
    from caption_debias.curate.images import top_folder

    before = {"image_missing": "missing", "image_unreadable": "unreadable"}
    lost: dict[str, dict[str, Any]] = {}
    for line in scored_removed:
        if line["reason"] in before:
            g = lost.setdefault(top_folder(line["image"]), {"counts": Counter(), "examples": {}})
            g["counts"][before[line["reason"]]] += 1
            g["examples"].setdefault(before[line["reason"]], []).append(line["image"])
    if all(s.get("coverage") is None for s in sides):  # no --image-root: not checked
        return None
    merged: dict[str, dict[str, Any]] = {}
    for side in [*sides, {"coverage": lost}]:
        for folder, cov in (side.get("coverage") or {}).items():
            m = merged.setdefault(
                folder, {"present": 0, "missing": 0, "unreadable": 0, "not_checked": 0, "examples": {}}
            )
            for status, n in cov["counts"].items():
                m[status] += n
            for status, paths in cov["examples"].items():
                ex = m["examples"].setdefault(status, [])
                ex.extend(paths[: signals.EXAMPLES - len(ex)])
    return dict(sorted(merged.items()))


def curate(inputs: Sequence[str | Path], out: str | Path, options: CurateOptions | None = None) -> dict[str, Any]:
    """Curate the prepared (or curated) folders `inputs` into `out`; returns the manifest."""
    options = options or CurateOptions()
    # the root given, else the one the inputs record: resolved once here, recorded in the manifest
    options, root = stage_root(options, inputs)
    folder = stage_folder(storage.as_path(out))
    with stage_run(folder, options, inputs):
        return _curate(inputs, folder, options, root)


def _curate(
    given: Sequence[str | Path], folder: StageFolder, options: CurateOptions, root: Root | None
) -> dict[str, Any]:
    from caption_debias.curate import manifest as manifest_mod
    from caption_debias.curate.summary import print_summary

    started = time.monotonic()
    out = folder.out
    inputs = _open_inputs(given, out)
    # the key files read once: their keys decide the rows and their bytes' sha256 is what is recorded
    key_lists = options.key_lists()
    shaping = {
        "inputs": [f["path"] for f in inputs.folders],
        "input_manifests": [f["manifest_sha256"] for f in inputs.folders],
        **options.output_shaping(key_lists),
    }
    if options.score_model is None:
        require_scores(inputs, options)
    user_keys = keys.check_inputs([s.path for s in inputs.shards], key_lists)
    folder.start(shaping, options.overwrite)
    (out / MANIFEST).unlink(missing_ok=True)  # only a finished run has a manifest
    say(f"reading {inputs.rows:,} rows in {len(inputs.shards)} shard{'s' * (len(inputs.shards) != 1)}", options.quiet)
    if root is None:
        say(no_root_line("curate"), options.quiet)
    scored_removed: list[dict[str, Any]] = []
    if options.score_model is not None:
        inputs, scored_removed = _score_first(given, out, options)
        require_scores(inputs, options)
    ev = None
    if options.decontaminate:
        from caption_debias.curate import decontaminate

        ev = decontaminate.load(options.decontaminate, options.image_root, options.lsh(), options.image_threads)
    reused: Counter = Counter()
    sig_sides, reused["signals"] = _run_signals(folder, inputs, options)
    counts = _image_counts(sig_sides, scored_removed)
    if root is not None:  # before any row is written: a wrong root is one line, not an empty dataset
        check_missing("curate", counts, root, options.max_missing_images)
    say(f"deciding which of {inputs.rows:,} rows to keep (duplicates across shards, thresholds)", options.quiet)
    decisions, _ = _decide(inputs, out, options, ev, key_lists)
    tally, masks, reused["shards"] = _run_writes(folder, inputs, options, decisions, sig_sides, scored_removed)
    n = len(inputs.shards)
    folder.prune(
        {
            f"{SHARDS_DIR}/part-*.parquet": [s["path"] for s in tally.shards],
            f"{signals.SIGNALS_DIR}/part-*.parquet": [signals.signals_name(i) for i in range(n)],
        },
        n,
        sidecar_dirs=[signals.SIGNALS_DIR, writer.WRITE_DIR],
    )
    manifest = manifest_mod.build(
        tally=tally,
        options=options,
        coverage=_merge_coverage(sig_sides, scored_removed),
        eval_sets=ev.sets if ev is not None else [],
        masks=masks,
        alignment=decisions["alignment"],
        key_lists=key_lists,
        elapsed_s=time.monotonic() - started,
    )
    if user_keys:
        manifest["curation"]["user_keys"] = user_keys  # the key files, and how many of their keys no input holds
    if decisions["kept_by_user"]:
        manifest["curation"]["kept_by_user"] = decisions["kept_by_user"]  # --keep-keys: what it overrode
    manifest["images"] = record(root, counts, options.max_missing_images)
    if options.score_model is not None:
        manifest["scored_from"] = [str(g) for g in given]  # the inputs; `inputs` names the scored folder
    write_json(manifest, out / MANIFEST)
    if not options.quiet:
        print_summary(manifest, str(out), reused)
    return manifest
