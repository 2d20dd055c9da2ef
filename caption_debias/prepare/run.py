"""prepare(): inputs -> ordered chunks -> text steps in workers -> atomic shards -> rejects, manifest.

Resumable: every finished chunk leaves a sidecar (rows, sha256, rejects, counts); a rerun with
the same options re-reads the input but reuses each chunk whose sidecar matches it.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Sequence

from caption_debias import engines, storage
from caption_debias.dataset import MANIFEST, REJECTS, STATE_DIR
from caption_debias.errors import IncompleteInput, UserError
from caption_debias.image_source.roots import resolve_root
from caption_debias.prepare import state
from caption_debias.prepare.manifest import build
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.progress import PrepareProgress, print_summary
from caption_debias.prepare.stream import InputCounts, chunks, reason_group, resolve_format
from caption_debias.runner import (
    StageFolder,
    Task,
    run_tasks,
    shard_name,
    stage_run,
    write_json,
    write_shard,
)


def _clean(text: Any) -> Any:
    """Reject fields may hold lone surrogates (undecodable input bytes): make them writable."""
    return text.encode("utf-8", "replace").decode("utf-8") if isinstance(text, str) else text


def finish_chunk(task: Task, segmenter: str, summary: str) -> dict[str, Any]:
    """Worker: text steps, shard and sidecar for one chunk (`task.work`). Returns the sidecar."""
    from caption_debias.prepare.steps import process_records

    chunk = task.work
    out_dir = task.folder
    table, step_rejects = process_records(chunk.records, segmenter, summary)
    per_input: dict[str, dict[str, int]] = {}
    for name, (read, rejected, duplicates) in chunk.counts.items():
        per_input[name] = {"read": read, "rejected": rejected, "duplicate_keys": duplicates}
    for rej in step_rejects:
        per_input[rej.input]["rejected"] += 1
    for counts in per_input.values():
        counts["written"] = counts["read"] - counts["rejected"]
    # Deterministic order: the chunk's reader rejects, then its text-step rejects.
    rejects = [*chunk.rejects, *step_rejects]
    side: dict[str, Any] = {
        "index": chunk.index,
        "fingerprint": task.fingerprint,
        "rows": len(table),
        "path": None,
        "sha256": None,
        "bytes": None,
        "inputs": per_input,
        "rejects": [{k: _clean(v) for k, v in r.to_json().items()} for r in rejects],
        "fatal": [r.input for r in chunk.rejects if r.fatal],
    }
    if len(table):
        rel = shard_name(chunk.index)
        side.update(path=rel, sha256=write_shard(table, out_dir / rel), bytes=(out_dir / rel).stat().st_size)
    write_json(side, task.sidecar_path)
    return side


def _resolve_inputs(inputs: Sequence[str | Path], fmt: str) -> list[tuple[str, Path, str]]:
    if not inputs:
        raise UserError("no input given")
    resolved = []
    for given in inputs:
        path = storage.as_path(given)
        if not path.exists():
            raise UserError(f"{given}: no such file or folder")
        resolved.append((str(given), path, _format_of(path, fmt)))
    names = [n for n, _, _ in resolved]
    if len(set(names)) != len(names):
        raise UserError("the same input is given twice")
    return resolved


def _format_of(path: Path, fmt: str) -> str:
    """The detected format (auto), or the given one once it is known to fit the path."""
    from caption_debias.readers import check_layout

    if fmt == "auto":
        return resolve_format(path, fmt)
    check_layout(path, fmt)
    return fmt


def prepare(inputs: Sequence[str | Path], output: str | Path, options: PrepareOptions | None = None) -> dict[str, Any]:
    """Prepare `inputs` into the folder `output`; returns the manifest.

    The folder is locked for the whole run (locking.folder_lock): a second run on it is
    refused at once. Raises IncompleteInput after writing everything when an input was cut
    off, WriteFailed (naming the file) when the output cannot be written.
    """
    options = options or PrepareOptions()
    options.validate()
    if options.image_root is not None:  # recorded resolved (image_source.roots): the later stages default to it
        options = dataclasses.replace(options, image_root=resolve_root(options.image_root).resolved)
    started = time.monotonic()
    folder = state.stage_folder(storage.as_path(output))
    with stage_run(folder, options, inputs):  # an input inside the output is refused before it is read
        return _prepare_locked(_resolve_inputs(inputs, options.format), folder, options, started)


class _Merged:
    """The chunks' sidecars gathered in chunk order: counts per input, rejects (appended to the list), shards."""

    def __init__(self, names: list[str], rejects_out, progress: PrepareProgress) -> None:
        self.per_input: dict[str, Counter[str]] = {name: Counter() for name in names}
        self.reasons: Counter = Counter()
        self.shards: list[dict[str, Any]] = []
        self.n_chunks = 0
        self.rejects_out, self.progress = rejects_out, progress

    def add(self, task: Task, side: dict[str, Any]) -> None:
        self.n_chunks += 1
        for name, counts in side["inputs"].items():
            self.per_input[name].update(counts)
        for rej in side["rejects"]:
            self.reasons[reason_group(rej["reason"])] += 1
            self.rejects_out.write(rej)
        if side["path"] is not None:
            self.shards.append({"path": side["path"], "rows": side["rows"], "sha256": side["sha256"]})
        read = sum(c["read"] for c in self.per_input.values())
        self.progress.update(read, sum(self.reasons.values()), len(self.shards))


Resolved = list[tuple[str, Path, str]]  # (input as given, its path, its format)


def _tasks(
    resolved: Resolved, out: Path, options: PrepareOptions, totals: dict[str, InputCounts], progress: PrepareProgress
) -> Iterator[Task]:
    """One task per chunk of the single ordered stream, fingerprinted by everything it carries."""
    for chunk in chunks(resolved, options, totals, on_read=progress.reading):
        sidecar = state.sidecar_name(chunk.index)
        yield Task(chunk.index, str(out), chunk.fingerprint(), sidecar, work=chunk, verify_digest=True)


def _prepare_locked(resolved: Resolved, folder: StageFolder, options: PrepareOptions, started: float) -> dict[str, Any]:
    shaping = {
        "inputs": [n for n, _, _ in resolved],
        "formats": [f for _, _, f in resolved],
        **options.output_shaping(),
    }
    out = folder.out
    folder.start(shaping, options.overwrite)
    totals = {name: InputCounts(name, fmt) for name, _, fmt in resolved}
    progress = PrepareProgress(options.quiet, [path for _, path, _ in resolved], options.log_interval, options.limit)
    fn = partial(finish_chunk, segmenter=options.segmenter, summary=options.summary)
    with folder.partial_lines(REJECTS) as rejects_out:  # rejects.jsonl appears whole or not at all
        merged = _Merged([name for name, _, _ in resolved], rejects_out, progress)
        tasks = _tasks(resolved, out, options, totals, progress)
        reused = run_tasks(folder, tasks, fn, engines.mapper(options), merged.add, progress)
    folder.prune(
        {f"{state.SHARDS_DIR}/part-*.parquet": [s["path"] for s in merged.shards]}, merged.n_chunks, [STATE_DIR]
    )
    return _finish(resolved, out, options, shaping, totals, merged, reused, started)


def _finish(
    resolved: Resolved,
    out: Path,
    options: PrepareOptions,
    shaping: dict[str, Any],
    totals: dict[str, InputCounts],
    merged: _Merged,
    reused: int,
    started: float,
) -> dict[str, Any]:
    """The manifest (written last), the summary, and IncompleteInput when an input was cut off."""
    from caption_debias.text import summary as summary_mod
    from caption_debias.text.segment import get_segmenter
    from caption_debias.text.tokenize import get_tokenizer

    per_input, reasons, shards = merged.per_input, merged.reasons, merged.shards
    input_entries: list[dict[str, Any]] = []
    for name, _, fmt in resolved:
        c = per_input[name]
        input_entries.append(
            {
                "path": name,
                "format": fmt,
                "read": c["read"],
                "written": c["written"],
                "rejected": c["rejected"],
                "duplicate_keys": c["duplicate_keys"],
                "complete": totals[name].complete,
            }
        )
    manifest = build(
        inputs=input_entries,
        shards=shards,
        rejects_by_reason=reasons,
        options={"inputs": shaping["inputs"], **options.to_dict()},
        tokenizer=get_tokenizer().describe(),
        segmenter=get_segmenter(options.segmenter).describe(),
        summary=summary_mod.describe(options.summary),
        elapsed_s=time.monotonic() - started,
        limit=options.limit,
    )
    write_json(manifest, out / MANIFEST)
    if not options.quiet:
        print_summary(manifest, str(out), reused)
    broken = [e["path"] for e in input_entries if not e["complete"]]
    if broken:
        raise IncompleteInput(
            f"{', '.join(broken)}: input cut off or broken mid-way; kept every complete record "
            f"before the fault (see {out / REJECTS}); manifest says complete: false"
        )
    return manifest
