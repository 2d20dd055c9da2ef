"""pack(): prepared rows -> chunks of --samples-per-shard rows -> one tar per chunk in workers -> manifest.

Chunk boundaries depend only on the input and --samples-per-shard (a row whose image fails
leaves its tar one sample shorter), so every tar is a function of its rows: the bytes do not
depend on --workers or the engine, and a rerun reuses each finished tar whose sidecar matches.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from functools import partial
from pathlib import Path
from typing import Any, Iterator

from caption_debias import engines, runner, storage
from caption_debias.dataset import MANIFEST as PREPARED_MANIFEST
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.image_source import Root, check_missing
from caption_debias.image_source.stage import record, stage_root
from caption_debias.pack import manifest as manifest_mod
from caption_debias.pack import state
from caption_debias.pack.manifest import PackTally
from caption_debias.pack.options import PackOptions
from caption_debias.pack.tars import COLUMNS, OPTIONAL_COLUMNS, SAMPLE_VERSION, pack_tar, sidecar_name
from caption_debias.progress import Progress, say
from caption_debias.runner import StageFolder, Summary, Task, run_tasks, stage_run, write_json


def pack(prepared: str | Path, out: str | Path, options: PackOptions | None = None) -> dict[str, Any]:
    """Pack the prepared (or curated) folder `prepared` into webdataset tars in `out`; returns the manifest."""
    options = options or PackOptions()
    # the root given, else the one the input records (a folder that is not a prepared one says so
    # first): resolved once here, read under by every worker, recorded in the manifest
    options, root = stage_root(options, [prepared])
    started = time.monotonic()
    ds = PreparedDataset.open(prepared)
    folder = state.stage_folder(storage.as_path(out))
    with stage_run(folder, options, [ds.folder]):
        assert root is not None  # stage_run's check (PackOptions.check) requires an image root
        return _pack(ds, str(prepared), folder, options, started, root)


def _chunks(ds: PreparedDataset, options: PackOptions) -> Iterator[list[dict[str, Any]]]:
    """Rows in input order (only --split's, when given), cut every --samples-per-shard rows."""
    chunk: list[dict[str, Any]] = []
    present = set(ds.columns())
    for batch in ds.iter_batches(list(COLUMNS) + [c for c in OPTIONAL_COLUMNS if c in present]):
        for row in batch.to_pylist():
            if options.split is not None and row["split"] != options.split:
                continue
            chunk.append(row)
            if len(chunk) == options.samples_per_shard:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def _tasks(ds: PreparedDataset, options: PackOptions, out: Path, shaping: dict[str, Any]) -> Iterator[Task]:
    """One task per chunk, fingerprinted by the options, its place, its first and last keys and the sample layout."""
    for index, rows in enumerate(_chunks(ds, options)):
        ident = {"index": index, "rows": len(rows), "first": rows[0]["key"], "last": rows[-1]["key"]}
        fp = runner.fingerprint({"shaping": shaping, **ident, "samples": SAMPLE_VERSION})  # older layouts: redone
        yield Task(index, str(out), fp, sidecar_name(index), work=rows)


def _pack(
    ds: PreparedDataset, given: str, folder: StageFolder, options: PackOptions, started: float, root: Root
) -> dict[str, Any]:
    out = folder.out
    input_digest = hashlib.sha256((ds.folder / PREPARED_MANIFEST).read_bytes()).hexdigest()
    shaping = {"input_manifest_sha256": input_digest, **options.output_shaping()}
    folder.start(shaping, options.overwrite)
    say(f"packing {ds.rows:,} rows of {given} into tars of {options.samples_per_shard:,} samples", options.quiet)
    tally = PackTally()
    total = None if options.split else ds.rows
    progress = Progress(
        "pack", "rows", total, quiet=options.quiet, interval=options.log_interval, heartbeat=True,
        extra=lambda: f"{len(tally.tars)} tars",
    )  # fmt: skip
    with folder.partial_lines(state.REMOVED) as removed:  # removed.jsonl appears whole or not at all

        def on_side(task: Task, side: dict[str, Any]) -> None:
            tally.add(side)
            removed.write_all(side["removed"])
            progress.each(tally.read)  # a line per tar written

        fn = partial(pack_tar, options=options)
        reused = run_tasks(folder, _tasks(ds, options, out, shaping), fn, engines.mapper(options), on_side, progress)
        if not tally.tars:
            raise UserError(f"{given}: no rows to pack" + (f" in split {options.split!r}" if options.split else ""))
    check_missing("pack", tally.images, root, options.max_missing_images)
    folder.prune({state.TAR_GLOB: [t["path"] for t in tally.tars]}, len(tally.tars), sidecar_dirs=[state.STATE_DIR])
    write_json(tally.sizes(), out / state.SIZES)
    manifest = manifest_mod.build(
        tally=tally,
        ds=ds,
        given=given,
        options=options,
        input_digest=input_digest,
        elapsed_s=time.monotonic() - started,
    )
    manifest["images"] = record(root, tally.images, options.max_missing_images)
    write_json(manifest, out / state.MANIFEST)
    if not options.quiet:
        _summary(manifest, out, reused)
    return manifest


# fsspec's reader in a `pipe:` for a store webdataset has no handler for (the toolkit's own dependency)
FSSPEC_CAT = (
    'python -c "import shutil,sys,fsspec; shutil.copyfileobj(fsspec.open(sys.argv[1]).open(), sys.stdout.buffer)"'
)


def open_clip_train_flags(out: Any, manifest: dict[str, Any]) -> str:
    """open_clip_train's data flags for the packed tars, in a form webdataset's gopen opens: a local
    folder as it is (open_clip_train reads sizes.json beside the tars); s3:// through `aws s3 cp
    URL -` in a `pipe:` (webdataset has no s3 handler); gs:// and http(s):// as they are (its gsutil and
    curl handlers); any other store through fsspec in a `pipe:`. Off a local folder open_clip_train
    cannot read sizes.json, so the line names --train-num-samples."""
    pattern = f"{str(out).rstrip('/')}/{manifest['train_data']}"
    proto = storage.protocol(str(out))
    if proto is None:
        return f"--train-data '{pattern}'"
    if proto in ("s3", "s3a"):
        data = f"pipe:aws s3 cp s3{pattern[len(proto) :]} -"
    elif proto in ("gs", "http", "https"):
        data = pattern
    else:
        data = f"pipe:{FSSPEC_CAT} {pattern}"
    return f"--train-data {shlex.quote(data)} --train-num-samples {manifest['counts']['written']}"


def _summary(manifest: dict[str, Any], out: Path, reused: int) -> None:
    c = manifest["counts"]
    train_data = open_clip_train_flags(out, manifest)
    Summary(
        "pack",
        str(out),
        {"read": c["read"], "written": c["written"], "removed": c["removed"]},
        outputs=len(manifest["tars"]),
        outputs_noun="tars",
        reused=reused,
        elapsed_s=manifest["elapsed_s"] or 0.0,
        reasons=c["removed_by_reason"],
        reason_title="removal reason",
        details=str(out / state.REMOVED) if c["removed"] else None,
        notes=[f"  open_clip_train: --dataset-type webdataset {train_data}"],
    ).print()
