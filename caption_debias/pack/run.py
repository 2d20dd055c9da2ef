"""pack(): prepared rows -> chunks of --samples-per-shard rows -> one tar per chunk in workers -> manifest.

Chunk boundaries depend only on the input and --samples-per-shard (a row whose image fails
leaves its tar one sample shorter), so every tar is a function of its rows: the bytes do not
depend on --workers or the engine, and a rerun reuses each finished tar whose sidecar matches.
"""

from __future__ import annotations

import hashlib
import shlex
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Iterator

from caption_debias import engines, runner, storage
from caption_debias.dataset import MANIFEST as PREPARED_MANIFEST
from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.image_source import ImageCounts, Root, check_missing
from caption_debias.image_source.stage import record, stage_root
from caption_debias.pack import state
from caption_debias.pack.images import resizer_version
from caption_debias.pack.options import PackOptions
from caption_debias.pack.tars import COLUMNS, OPTIONAL_COLUMNS, SAMPLE_VERSION, pack_tar, sidecar_name, tar_name
from caption_debias.progress import Progress, say
from caption_debias.runner import (
    StageFolder,
    Summary,
    Task,
    WriteFailed,
    manifest_stamp,
    os_error_text,
    reconcile,
    run_tasks,
    write_json,
)


def pack(prepared: str | Path, out: str | Path, options: PackOptions | None = None) -> dict[str, Any]:
    """Pack the prepared (or curated) folder `prepared` into webdataset tars in `out`; returns the manifest."""
    options = options or PackOptions()
    # the root given, else the one the input records (a folder that is not a prepared one says so
    # first): resolved once here, read under by every worker, recorded in the manifest
    options, root = stage_root(options, [prepared])
    started = time.monotonic()
    ds = PreparedDataset.open(prepared)
    out_dir: Path = storage.as_path(out)
    storage.require_shared(out_dir, options.workers, options.engine, "--out")
    storage.refuse_overlap([ds.folder], out_dir)
    folder = state.stage_folder(out_dir)
    assert root is not None  # PackOptions.check requires an image root
    with folder.locked(), engines.runtime(options):
        try:
            return _pack(ds, str(prepared), folder, options, started, root)
        except OSError as exc:  # a write no writer named (a full disk's errors name no file)
            raise WriteFailed(f"{exc.filename or out_dir}: {os_error_text(exc)}") from None


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
    tars: list[dict[str, Any]] = []
    reasons: Counter = Counter()
    read: Counter[str] = Counter()
    counts = [ImageCounts()]
    total = None if options.split else ds.rows
    progress = Progress(
        "pack", "rows", total, quiet=options.quiet, interval=options.log_interval, heartbeat=True,
        extra=lambda: f"{len(tars)} tars",
    )  # fmt: skip
    with folder.partial_lines(state.REMOVED) as removed:  # removed.jsonl appears whole or not at all

        def on_side(task: Task, side: dict[str, Any]) -> None:
            read["rows"] += side["rows"]
            if side.get("images"):  # a sidecar of an older run has none
                counts[0] = counts[0].merge(ImageCounts.from_dict(side["images"]))
            for entry in side["removed"]:
                reasons[entry["reason"]] += 1
                removed.write(entry)
            tars.append({k: side[k] for k in ("path", "samples", "rows", "sha256", "bytes")})
            progress.each(read["rows"])  # a line per tar written

        fn = partial(pack_tar, options=options)
        reused = run_tasks(folder, _tasks(ds, options, out, shaping), fn, engines.mapper(options), on_side, progress)
        if not tars:
            raise UserError(f"{given}: no rows to pack" + (f" in split {options.split!r}" if options.split else ""))
    check_missing("pack", counts[0], root, options.max_missing_images)
    folder.prune({state.TAR_GLOB: [t["path"] for t in tars]}, len(tars), sidecar_dirs=[state.STATE_DIR])
    write_json({t["path"]: t["samples"] for t in tars}, out / state.SIZES)
    written = sum(t["samples"] for t in tars)
    reconcile("pack", read=read["rows"], written=written, removed=sum(reasons.values()))
    manifest = _manifest(ds, given, options, tars, read["rows"], reasons, input_digest, started)
    manifest["images"] = record(root, counts[0], options.max_missing_images)
    write_json(manifest, out / state.MANIFEST)
    if not options.quiet:
        _summary(manifest, out, reused)
    return manifest


def _manifest(
    ds: PreparedDataset,
    given: str,
    options: PackOptions,
    tars: list[dict[str, Any]],
    read: int,
    reasons: Counter,
    input_digest: str,
    started: float,
) -> dict[str, Any]:
    written = sum(t["samples"] for t in tars)
    return {
        "kind": state.KIND,
        "format": "webdataset",
        "complete": True,
        "counts": {
            "read": read,
            "written": written,
            "removed": read - written,
            "removed_by_reason": {r: reasons[r] for r in sorted(reasons, key=lambda r: (-reasons[r], r))},
        },
        "tars": tars,
        "train_data": train_data_pattern(len(tars)),
        "input": {"path": given, "manifest_sha256": input_digest, "rows": ds.rows},
        "image": {
            "format": "jpg",
            "image_size": options.image_size,
            "resize_mode": options.resize_mode,
            "encode_quality": options.encode_quality,
            "resizer": resizer_version(),
        },
        "sample": {"names": "NNNNN + row position in the tar's chunk", "members": ["jpg", "json", "txt"]},
        "options": options.to_dict(),
        # What made the token ids in KEY.json (train checks it against the model's tokenizer).
        "tokenizer": ds.manifest.get("tokenizer"),
        "segmenter": ds.manifest.get("segmenter"),
        "summary": ds.manifest.get("summary"),
        **manifest_stamp(time.monotonic() - started),
    }


def train_data_pattern(n_tars: int) -> str:
    """The brace pattern open_clip_train's --train-data expands to every tar (relative to the folder)."""
    return f"{{{tar_name(0)[:-4]}..{tar_name(n_tars - 1)[:-4]}}}.tar"


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
