"""Tasks and their completion records: `Task`, `run_tasks`, sidecars, fingerprints, reconciliation."""

from __future__ import annotations

import hashlib
import json
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, cast

from caption_debias import __version__, shard_digests, storage
from caption_debias.engines.local import Ready
from caption_debias.schema_types import TaskSidecar
from caption_debias.shard_digests import sha256_file

if TYPE_CHECKING:
    from caption_debias.runner.folder import StageFolder

SHARDS_DIR = "shards"  # a folder of the prepared-folder contract keeps its shards here (prepare, curate, score)


class CountsDoNotReconcile(RuntimeError):
    """A stage's counts do not add up: rows would be lost or invented (a bug, never bad input)."""


def load_sidecar(
    path: Path, fingerprint: str, out: Path, output: Path | None = None, *, verify_digest: bool = False
) -> dict[str, Any] | None:
    """The finished task's sidecar at `path` when it is this task's and its output is in place, else None.

    Its output is `output` when given, else `out / side["path"]` (a task that wrote no file
    has path None). In place means there with the size the sidecar recorded and, with
    `verify_digest` (shards, whose digests readers check), the sha256 it recorded: a shard
    replaced or edited since it was written is redone (a local check; object stores by size).
    """
    try:
        side = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(side, dict) or side.get("fingerprint") != fingerprint:
        return None
    if output is None and side.get("path") is not None:
        output = out / side["path"]
    if output is None:
        return side
    if not output.is_file():
        return None
    sized = "bytes" in side  # every task sidecar records its output's size; score's reference record only its digest
    if sized and output.stat().st_size != side["bytes"]:
        return None
    if verify_digest and not storage.is_remote(output):
        if shard_digests.file_sha256(output) != side.get("sha256"):
            return None
    elif verify_digest and not sized:  # an object with no recorded size: its digest is the only check
        if sha256_file(output) != side.get("sha256"):
            return None
    return side


def part_name(folder: str, index: int, suffix: str = ".json") -> str:
    """Task `index`'s file in `folder` (relative to the stage folder): FOLDER/part-NNNNN.json by default."""
    return f"{folder}/part-{index:05d}{suffix}"


def shard_name(index: int) -> str:
    """Task `index`'s output shard, relative to the folder: shards/part-NNNNN.parquet."""
    return part_name(SHARDS_DIR, index, ".parquet")


def fingerprint(what: Any) -> str:
    """What a task's output is made from, as one digest: sha256 of `what` as canonical JSON (sorted keys).

    A sidecar whose fingerprint is another is not this task's, so a rerun redoes the task.
    """
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def manifest_stamp(elapsed_s: float) -> dict[str, Any]:
    """The manifest's last keys: which toolkit wrote it, when, in how long."""
    return {
        "toolkit_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 3),
    }


@dataclass(frozen=True)
class Task:
    """One numbered unit of a stage's work (datatrove's rank): what the worker gets, and how a rerun knows it is done.

    `work` is the stage's own typed input (a chunk of records, an input shard, a chunk of rows);
    the worker function writes the output and then the sidecar at `out / sidecar`, its
    completion record with `fingerprint`. `output`: the file the sidecar vouches for when it
    names none in its "path" (curate's signals file); `verify_digest`: a reused output's sha256
    is checked too (shards, whose digests readers check).
    """

    index: int
    out: str
    fingerprint: str
    sidecar: str
    work: Any = None
    output: str | None = None
    verify_digest: bool = False

    @property
    def folder(self) -> Path:
        return storage.as_path(self.out)

    @property
    def sidecar_path(self) -> Path:
        return self.folder / self.sidecar

    def finished(self) -> TaskSidecar | None:
        """The sidecar an earlier run left for this very task, with its output in place; else None."""
        output = self.folder / self.output if self.output else None
        side = load_sidecar(self.sidecar_path, self.fingerprint, self.folder, output, verify_digest=self.verify_digest)
        return cast(TaskSidecar, side)  # a task's sidecar (schemas/sidecar.schema.json), or None


Engine = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]  # engines.mapper(options)


def run_tasks(
    folder: StageFolder,
    tasks: Iterable[Task],
    fn: Callable[[Task], dict[str, Any]],
    engine: Engine,
    on_side: Callable[[Task, dict[str, Any]], None],
    progress: Any = None,
) -> int:
    """Run every task not finished by an earlier run through `engine`; `on_side(task, sidecar)` for each, in task order.

    A resumed folder (`folder.start` returned True) reuses each task whose sidecar matches
    (`Task.finished`) without running it. `progress` (anything with `close(finished)`) is
    closed when the loop ends: finished only when every task came back. Returns the number of
    tasks reused.
    """
    reused = 0
    sent: deque[Task] = deque()  # tasks handed to the engine, in order: its results come back in the same order

    def feed() -> Iterator[Any]:
        nonlocal reused
        for task in tasks:
            sent.append(task)
            side = task.finished() if folder.resumed else None
            if side is not None:
                reused += 1
                yield Ready(side)
            else:
                yield task

    finished = False
    try:
        for side in engine(fn, feed()):
            on_side(sent.popleft(), side)
        finished = True
    finally:
        if progress is not None:
            progress.close(finished)
    return reused


def reconcile(stage: str, *, read: int, written: int, removed: int = 0, rejected: int = 0) -> None:
    """Raise CountsDoNotReconcile unless read == written + removed + rejected."""
    if read != written + removed + rejected:
        raise CountsDoNotReconcile(
            f"{stage}: counts do not reconcile: read {read} != written {written} + removed {removed} "
            f"+ rejected {rejected}; this is a bug, please report it"
        )
