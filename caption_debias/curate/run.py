"""curate(): input folders -> signals (parallel) -> decisions (global) -> curated shards (parallel) -> manifest.

Resumable like prepare: every finished shard of each parallel step leaves a sidecar with a
fingerprint of what it was made from; a rerun with the same inputs and options reuses each
one that matches. The decisions are recomputed from the signal files on every run (cheap,
and they depend on every row, so nothing partial of them is ever trusted).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

from caption_debias import storage
from caption_debias.curate import dedup, signals, writer
from caption_debias.curate.inputs import Inputs, open_inputs
from caption_debias.curate.options import CurateOptions
from caption_debias.dataset import MANIFEST, default_image_root
from caption_debias.prepare.distributor import Ready, ordered_map
from caption_debias.runner import StageFolder, StageProgress, WriteFailed, load_sidecar, os_error_text, write_json

REMOVED = "removed.jsonl"
SHARDS_DIR = "shards"
STATE_DIR = ".curate"


def _mapper(options: CurateOptions) -> Callable:
    """The local process pool, or Ray Data tasks running the same step functions (--engine ray)."""
    if options.engine == "ray":
        from functools import partial

        from caption_debias.prepare.ray_engine import ray_ordered_map

        return partial(ray_ordered_map, address=options.ray_address)
    return ordered_map


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


def _signal_tasks(inputs: Inputs, out: Path, options: CurateOptions, resumed: bool, reused: Counter) -> Iterator[Any]:
    for s in inputs.shards:
        fp = signals.fingerprint(s.sha256, s.start, options.image_root, options.lsh())
        side = _load_signal_sidecar(out, s.index, fp) if resumed else None
        if side is not None:
            reused["signals"] += 1
            yield Ready(side)
        else:
            yield {
                "index": s.index,
                "path": s.path,
                "rows": s.rows,
                "start": s.start,
                "out": str(out),
                "fingerprint": fp,
                "image_root": options.image_root,
                "image_threads": options.image_threads,
                "lsh": list(options.lsh()),
            }


def _load_signal_sidecar(out: Path, index: int, fp: str) -> dict[str, Any] | None:
    return load_sidecar(signals.sidecar_path(out, index), fp, out, output=signals.signals_path(out, index))


def _write_tasks(
    inputs: Inputs, out: Path, options: CurateOptions, decisions: dict, sides: list, resumed: bool, reused: Counter
) -> Iterator[Any]:
    for s, sig_side in zip(inputs.shards, sides):
        removed, dup = decisions["removed"].get(s.index, {}), decisions["duplicate_count"].get(s.index, {})
        task = {
            "index": s.index,
            "path": s.path,
            "folder": s.folder,
            "rows": s.rows,
            "sha256": s.sha256,
            "signals": str(signals.signals_path(out, s.index)),
            "signals_sha256": sig_side["sha256"],
            "removed": {str(k): v for k, v in removed.items()},
            "duplicate_count": {str(k): v for k, v in dup.items()},
            "image_root": options.image_root,
            "embed": options.embed_images,
            "out": str(out),
        }
        task["fingerprint"] = writer.fingerprint(task)
        side = writer.load_sidecar(out, s.index, task["fingerprint"]) if resumed else None
        if side is not None:
            reused["shards"] += 1
            yield Ready(side)
        else:
            yield task


def _decide(inputs: Inputs, out: Path, options: CurateOptions, ev) -> tuple[dict, dedup.Decisions]:
    """Decisions per shard: {index: {local row: [reason code, detail]}}, plus duplicate counts."""
    import numpy as np

    table = dedup.SignalTable([signals.signals_path(out, s.index) for s in inputs.shards], inputs.rows)
    shared = dedup.local_shared_keys
    if options.engine == "ray":
        from caption_debias.curate.ray_engine import ray_shared_keys

        shared = ray_shared_keys
    d = dedup.decide(table, options, ev, images=options.image_root is not None, shared_keys=shared)
    refs = np.fromiter(set(d.ref.values()), np.int64)
    keys = table.rows_where(refs, ["key"]) if len(refs) else None
    key_of = dict(zip(keys["order"].to_list(), keys["key"].to_list())) if keys is not None else {}
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
    return {"removed": removed, "duplicate_count": dup}, d


def _merge_coverage(sides: list[dict]) -> dict[str, Any] | None:
    if all(s.get("coverage") is None for s in sides):
        return None
    merged: dict[str, dict[str, Any]] = {}
    for side in sides:
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


def curate(inputs: list[str | Path], out: str | Path, options: CurateOptions | None = None) -> dict[str, Any]:
    """Curate the prepared (or curated) folders `inputs` into `out`; returns the manifest."""
    options = options or CurateOptions()
    if options.image_root is None:  # the root the inputs were prepared with, when they record one
        options = dataclasses.replace(options, image_root=default_image_root(None, inputs))
    if options.image_root is not None:
        storage.require_local(options.image_root, "--image-root")
    options.validate()
    out = storage.as_path(out)
    storage.require_shared(out, options.workers, options.engine, "--out")
    folder = stage_folder(out)
    folder.check_not_a_file()
    with folder.locked():
        try:
            if options.engine == "ray":
                from caption_debias.curate.ray_engine import ray_runtime

                with ray_runtime(options.ray_address, options.workers):
                    return _curate(inputs, folder, options)
            return _curate(inputs, folder, options)
        except OSError as exc:  # a write no writer named (a full disk's errors name no file)
            raise WriteFailed(f"{exc.filename or out}: {os_error_text(exc)}") from None


def _curate(given: list[str | Path], folder: StageFolder, options: CurateOptions) -> dict[str, Any]:
    from caption_debias.curate import manifest as manifest_mod
    from caption_debias.curate.summary import print_summary

    started = time.monotonic()
    out = folder.out
    inputs = open_inputs(given, out)
    shaping = {
        "inputs": [f["path"] for f in inputs.folders],
        "input_manifests": [f["manifest_sha256"] for f in inputs.folders],
        **options.output_shaping(),
    }
    resumed = folder.start(shaping, options.overwrite)
    ev = None
    if options.decontaminate:
        from caption_debias.curate import decontaminate

        ev = decontaminate.load(options.decontaminate, options.image_root, options.lsh(), options.image_threads)
    reused: Counter = Counter()
    mapper = _mapper(options)
    in_flight = options.max_in_flight * options.workers
    progress = StageProgress("curate signals", "rows", inputs.rows, quiet=options.quiet, interval=options.log_interval)
    sig_sides, done = [], 0
    for side in mapper(
        signals.compute, _signal_tasks(inputs, out, options, resumed, reused), options.workers, in_flight
    ):
        sig_sides.append(side)
        done += side["rows"]
        progress.update(done, extra=f"{len(sig_sides)} of {len(inputs.shards)} shards")
    progress.close(finished=True)
    decisions, _ = _decide(inputs, out, options, ev)
    write_sides = mapper(
        writer.write,
        _write_tasks(inputs, out, options, decisions, sig_sides, resumed, reused),
        options.workers,
        in_flight,
    )
    shards, reasons = [], Counter()
    per_folder: dict[str, Counter] = {f["path"]: Counter() for f in inputs.folders}
    progress = StageProgress("curate write", "rows", inputs.rows, quiet=options.quiet, interval=options.log_interval)
    finished = False
    try:
        with folder.partial_lines(REMOVED) as removed_out:  # removed.jsonl appears whole or not at all
            for s, side in zip(inputs.shards, write_sides):
                per_folder[s.folder]["read"] += side["read"]
                per_folder[s.folder]["written"] += side["rows"]
                for line in side["removed"]:
                    reasons[line["reason"]] += 1
                    per_folder[s.folder]["removed"] += 1
                    removed_out.write(line)
                if side["path"] is not None:
                    shards.append({"path": side["path"], "rows": side["rows"], "sha256": side["sha256"]})
                progress.update(sum(c["read"] for c in per_folder.values()), extra=f"{len(shards)} shards")
            finished = True
    finally:
        progress.close(finished)
    n = len(inputs.shards)
    folder.prune(
        {
            f"{SHARDS_DIR}/part-*.parquet": [s["path"] for s in shards],
            f"{signals.SIGNALS_DIR}/part-*.parquet": [f"{signals.SIGNALS_DIR}/part-{i:05d}.parquet" for i in range(n)],
        },
        n,
        sidecar_dirs=[signals.SIGNALS_DIR, writer.WRITE_DIR],
    )
    manifest = manifest_mod.build(
        inputs=inputs,
        per_folder=per_folder,
        shards=shards,
        reasons=reasons,
        options=options,
        coverage=_merge_coverage(sig_sides),
        eval_sets=ev.sets if ev is not None else [],
        elapsed_s=time.monotonic() - started,
    )
    write_json(manifest, out / MANIFEST)
    if not options.quiet:
        print_summary(manifest, str(out), reused)
    return manifest
