"""The stage runner: what every stage that writes a folder of shards shares (prepare, curate, pack, score).

Modelled on datatrove's executor: a stage is a list of numbered tasks (one input chunk or
shard each) whose results are written under their final names only when whole, each
finished task leaves a small JSON sidecar (its completion record: counts, digest, a
fingerprint of what it was made from), and a rerun skips every task whose sidecar matches.
The stage then gathers the sidecars in task order, writes its appended lists, checks that
its counts reconcile and writes its manifest last.

One stage run, in order::

    from caption_debias import engines
    from caption_debias.progress import Progress
    from caption_debias.runner import StageFolder, Summary, Task, reconcile, run_tasks, write_json

    folder = StageFolder(out, "score", state_dir=".score", owned=("manifest.json", "removed.jsonl", "shards"),
                         subdirs=("shards",), verb="scored")
    with folder.locked(), engines.runtime(options):     # one writer per folder; OSError -> one line
        folder.start(shaping, overwrite)                 # folder.resumed: same options as the run before
        tasks = (Task(i, str(out), fingerprint(...), f".score/shards/part-{i:05d}.json", work=shard) for ...)
        progress = Progress("score", "rows", total=n_rows, quiet=quiet, interval=log_interval)
        with folder.partial_lines("removed.jsonl") as removed:   # OUT/.score/removed.jsonl.partial
            def on_side(task, side):                     # in task order; a worker wrote the output, then `side`
                removed.write_all(side["removed"])
                progress.update(done, extra=f"{n} shards")
            reused = run_tasks(folder, tasks, fn, engines.mapper(options), on_side, progress)
        folder.prune({"shards/part-*.parquet": written_paths}, n_tasks, sidecar_dirs=[".score/shards"])
        reconcile("score", read=read, written=written, removed=removed.count)
        write_json({**manifest, **manifest_stamp(elapsed)}, out / "manifest.json")   # last: only a finished run has one
    Summary("score", str(out), {"read": read, "written": written, "removed": removed.count}).print()

What each piece guarantees:

- `StageFolder.locked()`: `locking.folder_lock` for the whole run (a second writer is
  refused at once, a killed one never blocks), and an OS error outside the atomic writers
  (which name their file themselves) becomes one `WriteFailed` line naming the file.
- `StageFolder.start(shaping, overwrite)` (`work=`: globs of the outputs that make a run
  worth resuming; default any task sidecar): resume state in `OUT/<state_dir>/state.json`
  (`{"options": shaping}`, the options that shape the output). A run is resumed only when
  that state is there and it left work worth keeping (by default a task sidecar):
  with other options it is refused in one line naming them, unless `overwrite`. Anything
  else starts afresh: the stage's own files are removed (never the lock files), a folder
  holding files of its own is refused unless `overwrite`. The manifest is removed either
  way (only a finished run has one).
- `atomic_output`, `write_shard`, `write_json`, `write_text`: write a temp name, fsync,
  rename (a remote folder: a local file put under its final name, where it appears whole);
  a failed write removes its temp and raises `WriteFailed` naming the file.
- `Task`, `run_tasks`: a task is what a worker gets (`work`, typed) and how a rerun knows it
  is done (its sidecar and fingerprint); `run_tasks` passes every task a resumed folder finished
  before (`Task.finished`) through without running it, runs the others on the engine
  (caption_debias/engines: `engines.mapper(options)`) and hands each sidecar back in task order.
- `load_sidecar`: a finished task's sidecar, when its fingerprint matches and the file it
  names (`side["path"]` under OUT, or `output`) is there with the recorded size.
- `fingerprint`, `manifest_stamp`, `shard_name`: what an output is made from as one digest; a
  manifest's last keys; `shards/part-NNNNN.parquet`.
- `StageFolder.partial_lines(name)`: a JSON-lines list (rejects, removals) appended in task
  order to `OUT/<state_dir>/<name>.partial` (a local temp for a remote folder), written
  to `OUT/<name>` whole when the block ends without an error.
- `reconcile(stage, read=..., written=..., removed=..., rejected=...)`: raises
  `CountsDoNotReconcile` unless `read == written + removed + rejected` (an error, so
  `python -O` keeps the check).
- Progress is not the runner's: every command shares `caption_debias.progress.Progress`
  (a rich bar on a terminal, plain lines every `--log-interval` seconds off it, nothing when quiet).
- `Summary`: the end-of-run lines (counts, outputs, time, rate, reasons, where the details are).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, cast

from caption_debias import __version__, shard_digests, storage
from caption_debias.engines.local import Ready
from caption_debias.errors import UserError
from caption_debias.locking import LOCK_FILES, folder_lock
from caption_debias.schema_types import TaskSidecar
from caption_debias.shard_digests import sha256_file  # noqa: F401  (the digest manifests record and readers check)
from caption_debias.worker_life import exit_if_orphaned

MANIFEST = "manifest.json"
SHARDS_DIR = "shards"  # a folder of the prepared-folder contract keeps its shards here (prepare, curate, score)
STATE_FILE = "state.json"
TEMP_MARK = ".tmp-"  # write-then-rename temps are named .NAME.tmp-PID beside their file
PARTIAL = ".partial"


# -- atomic writes ------------------------------------------------------------------------


class WriteFailed(UserError):
    """An output file could not be written (the disk, not the input, is at fault)."""


class CountsDoNotReconcile(RuntimeError):
    """A stage's counts do not add up: rows would be lost or invented (a bug, never bad input)."""


def os_error_text(exc: OSError) -> str:
    """'No space left on device' rather than pyarrow's or Python's longer forms."""
    if exc.errno:
        return os.strerror(exc.errno)
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def temp_path(path: Path) -> Path:
    """Where `path` is written before its rename (a local temp file for a remote path)."""
    if storage.is_remote(path):  # written locally, then put under `path` (storage.put_local)
        return storage.local_temp(path.name)
    return path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}")


def is_temp(path: Path) -> bool:
    """A write-then-rename temp file a killed run may have left."""
    return path.name.startswith(".") and TEMP_MARK in path.name


@contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """Yield a temp path to write; synced and renamed to `path` after, removed on failure."""
    if storage.is_remote(path):
        with _remote_atomic(path) as tmp:
            yield tmp
        return
    tmp = temp_path(path)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        exit_if_orphaned(tmp)  # a worker whose command died holds no lock: it must not publish
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteFailed(f"{path}: cannot write ({os_error_text(exc)})") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def _remote_atomic(path) -> Iterator[Path]:
    """The object-store analogue: a local temp file, put under `path` once it is complete."""
    try:
        with storage.staged(path) as tmp:
            yield tmp
    except OSError as exc:
        raise WriteFailed(f"{path}: cannot write ({os_error_text(exc)})") from None


def write_shard(table, path: Path) -> str:
    """Write a zstd Parquet shard (a pyarrow Table) atomically; returns its sha256."""
    import pyarrow.parquet as pq

    with atomic_output(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=min(max(len(table), 1), 8192))
        digest = sha256_file(tmp)
    return digest


def write_json(data: Any, path: Path) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1, default=str) + "\n", encoding="utf-8")


def write_text(text_lines: Iterable[str], path: Path) -> None:
    """Write lines (an iterable of str) atomically."""
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            for line in text_lines:
                fh.write(line)


# -- task completion ----------------------------------------------------------------------


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


def shard_name(index: int) -> str:
    """Task `index`'s output shard, relative to the folder: shards/part-NNNNN.parquet."""
    return f"{SHARDS_DIR}/part-{index:05d}.parquet"


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


class PartialLines:
    """JSON lines appended in task order to a `.partial` file; see StageFolder.partial_lines."""

    def __init__(self, fh) -> None:
        self.fh = fh
        self.count = 0

    def write(self, entry: dict[str, Any]) -> None:
        self.fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self.count += 1

    def write_all(self, entries: Iterable[dict[str, Any]]) -> None:
        for entry in entries:
            self.write(entry)


# -- the output folder --------------------------------------------------------------------


class StageFolder:
    """One stage's output folder: the files it owns, its lock, its resume state.

    `owned`: top-level names the stage writes (files or folders, its state folder included
    by itself); `owned_pattern`: a regex for more of them (pack's NNNNN.tar); `subdirs`:
    folders to create at start (shards/, a step's sidecar folder); `work`: globs under OUT
    of the outputs that make a run worth resuming (prepare's shards: a run whose every
    chunk was rejected is not; default: any task sidecar); `verb`: how the
    different-options refusal names the run ("prepared", "curated", ...).
    """

    def __init__(
        self,
        out: Any,
        command: str,
        *,
        state_dir: str,
        owned: Iterable[str] = (MANIFEST,),
        owned_pattern: str | None = None,
        subdirs: Iterable[str] = (),
        work: Iterable[str] = (),
        verb: str | None = None,
    ) -> None:
        self.out = storage.as_path(out)
        self.command = command
        self.state_dir = state_dir
        self.owned = frozenset({*owned, state_dir.split("/")[0]})
        self.owned_pattern = re.compile(owned_pattern) if owned_pattern else None
        self.subdirs = tuple(subdirs)
        self.work = tuple(work)
        self.verb = verb or f"written by {command}"
        self.resumed = False  # set by start(): an earlier run's finished tasks are reused

    @property
    def state(self) -> Path:
        return self.out / self.state_dir

    def owns(self, path: Path) -> bool:
        return path.name in self.owned or bool(self.owned_pattern and self.owned_pattern.fullmatch(path.name))

    def check_not_a_file(self) -> None:
        if self.out.exists() and not self.out.is_dir():
            raise UserError(f"--out {self.out}: exists and is not a folder")

    @contextmanager
    def locked(self) -> Iterator[Path]:
        """Hold the folder's lock for the block; an OSError raised in it becomes one WriteFailed line."""
        self.check_not_a_file()
        with folder_lock(self.out, self.command):
            try:
                yield self.out
            except OSError as exc:  # writes not made through atomic_output (which names its file itself)
                raise WriteFailed(f"{exc.filename or self.out}: {os_error_text(exc)}") from None

    def finished_tasks(self) -> bool:
        """Whether an earlier run left work worth keeping: a file matching `work` (default: any task sidecar)."""
        if self.work:
            return any(not is_temp(p) for pattern in self.work for p in self.out.glob(pattern))
        state = self.state
        return state.is_dir() and any(p.name != STATE_FILE for p in state.rglob("*.json") if not is_temp(p))

    def start(self, shaping: dict[str, Any], overwrite: bool) -> bool:
        """Make OUT ready for a run; True when it resumes an earlier run with the same `shaping`."""
        out = self.out
        self.check_not_a_file()
        state_path = self.state / STATE_FILE
        entries = [p for p in out.iterdir() if p.name not in LOCK_FILES] if out.is_dir() else []
        others = sorted(p.name for p in entries if not self.owns(p) and not is_temp(p))
        resumable = state_path.is_file() and self.finished_tasks()
        if resumable and not overwrite:
            before = _read_state(state_path)
            if before != shaping:
                changed = sorted(k for k in set(before or {}) | set(shaping) if (before or {}).get(k) != shaping.get(k))
                raise UserError(
                    f"{out} was {self.verb} with different options or from other inputs "
                    f"({', '.join(changed) or 'unreadable state'}); use the same options to resume, or --overwrite to start over"
                )
            (out / MANIFEST).unlink(missing_ok=True)  # a manifest is only ever there for a finished run
            self._make_dirs()
            self.resumed = True
            return True
        if others and not overwrite and not state_path.is_file():
            raise UserError(
                f"--out {out}: folder is not empty and holds no {self.command} run "
                f"({', '.join(others[:3])}); use an empty folder or --overwrite"
            )
        # --overwrite, a run that finished no task, or a new folder: start from nothing
        for p in entries:
            if self.owns(p) or is_temp(p):
                storage.remove_tree(p) if p.is_dir() else p.unlink()
        self._make_dirs()
        write_json({"options": shaping}, state_path)
        self.resumed = False
        return False

    def _make_dirs(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        for sub in self.subdirs:
            (self.out / sub).mkdir(parents=True, exist_ok=True)

    @contextmanager
    def partial_lines(self, name: str) -> Iterator[PartialLines]:
        """Append JSON lines to OUT/<state_dir>/<name>.partial; OUT/<name> is written whole after the block.

        An error in the block leaves OUT/<name> as it was (the partial file is redone by the
        next run). A remote folder cannot append: its lines gather in a local temp file.
        """
        partial = self.state / f"{name}{PARTIAL}"
        if storage.is_remote(self.out):
            partial = storage.local_temp(name)
        try:
            with open(partial, "w", encoding="utf-8") as fh:
                lines = PartialLines(fh)
                yield lines
        except OSError as exc:  # a write to the list itself (its errors name no file)
            raise WriteFailed(f"{exc.filename or partial}: cannot write ({os_error_text(exc)})") from None
        except BaseException:
            if storage.is_remote(self.out):
                partial.unlink(missing_ok=True)
            raise
        with open(partial, encoding="utf-8") as fh:  # the list appears whole or not at all
            write_text(fh, self.out / name)
        partial.unlink()

    def prune(self, outputs: dict[str, Iterable[str]], n_tasks: int, sidecar_dirs: Iterable[str] = ()) -> None:
        """Remove what an earlier run left that this one did not write, and a killed run's temp files.

        `outputs`: {glob under OUT: relative paths this run wrote there}; every other match
        goes. Sidecars (`*.json` in `sidecar_dirs`, named NAME-N.json or N.json) of tasks
        numbered `n_tasks` or more go too.
        """
        out = self.out
        for pattern, keep in outputs.items():
            kept = set(keep)
            sub, _, names = pattern.rpartition("/")
            folder = out / sub if sub else out
            for p in folder.glob(names) if folder.is_dir() else ():
                rel = f"{sub}/{p.name}" if sub else p.name
                if rel not in kept and not is_temp(p):
                    p.unlink()
        for sub in sidecar_dirs:
            for p in (out / sub).glob("*.json"):
                index = _task_number(p)
                if index is not None and index >= n_tasks:
                    p.unlink()
        folders = {out, self.state, *(out / s for s in self.subdirs), *(out / s for s in sidecar_dirs)}
        for folder in folders:
            if folder.is_dir():
                for tmp in folder.glob(f".*{TEMP_MARK}*"):
                    tmp.unlink()


def _task_number(path: Path) -> int | None:
    digits = path.stem.rsplit("-", 1)[-1]
    return int(digits) if digits.isdigit() else None


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    return state.get("options", state.get("shaping"))  # "shaping": curate's state before the runner


# -- summary ------------------------------------------------------------------------------


def rate_text(rate: float) -> str:
    """A rate for the summary: whole numbers from 10 up, two significant digits below (0.33, not 0)."""
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


@dataclass
class Summary:
    """The end-of-run lines on stderr: counts, outputs, time and rate, reasons, where the details are.

    `counts` prints in order as "<unit> read N, written N, ..." (underscores as spaces);
    `notes` are further lines or rich renderables printed after the outputs line.
    """

    command: str
    out: str
    counts: dict[str, int]
    unit: str = "rows"
    outputs: int = 0
    outputs_noun: str = "shards"
    reused: int = 0
    elapsed_s: float = 0.0
    status: str | None = None
    reasons: dict[str, int] | None = None
    reason_title: str = "reason"
    details: str | None = None
    notes: list[Any] = field(default_factory=list)

    def print(self) -> None:
        from rich.console import Console
        from rich.table import Table

        console = Console(stderr=True, highlight=False)
        status = f": {self.status}" if self.status else ""
        console.print(f"[bold]{self.command}[/] -> {self.out}{status}")
        parts = [f"{k.replace('_', ' ')} {v:,}" for k, v in self.counts.items()]
        console.print(f"  {self.unit} " + ", ".join(parts))
        read = self.counts.get("read", 0)
        rate = read / self.elapsed_s if self.elapsed_s > 0 else 0.0
        again = f" ({self.reused} reused from an earlier run)" if self.reused else ""
        console.print(
            f"  {self.outputs_noun} {self.outputs:,}{again}, {self.elapsed_s:.1f} s, {rate_text(rate)} {self.unit}/s"
        )
        if self.reasons:
            table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
            table.add_column(self.reason_title)
            table.add_column("count", justify="right")
            items = list(self.reasons.items())
            for reason, n in items[:12]:
                table.add_row(reason, f"{n:,}")
            if len(items) > 12:
                table.add_row(f"... {len(items) - 12} more reasons", f"{sum(n for _, n in items[12:]):,}")
            console.print(table)
        for note in self.notes:
            console.print(note, soft_wrap=isinstance(note, str))
        if self.details:
            console.print(f"  details: {self.details}")
