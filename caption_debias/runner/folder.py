"""One stage's output folder: the files it owns, its lock, its resume state, its appended lists, its clean-up."""

from __future__ import annotations

import json
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.locking import LOCK_FILES, folder_lock
from caption_debias.runner.writes import TEMP_MARK, WriteFailed, is_temp, os_error_text, write_json, write_text

MANIFEST = "manifest.json"
STATE_FILE = "state.json"
PARTIAL = ".partial"


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
        """Hold the folder's lock for the block; an OSError raised in it becomes one WriteFailed line.

        Stages take it through `runner.stage_run`, which checks first that OUT is not a file.
        """
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
