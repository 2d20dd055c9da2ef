"""ImageSource: the images of a batch of rows, wherever they live under one root.

A batch (one task's rows) is planned before anything is read: rows are grouped by what holds
their image (a loose file, a tar, a parquet file), each tar and parquet file is read once in
its own order (tars.stream, parquet_samples.stream), and the caller's function is applied to
each image's bytes as they arrive, so only the images in flight are in memory. Rows naming the
same image share one read and one call. Results come back with their row index, in a read
order fixed by the rows alone (containers in order of their first row, members in file
order), never by thread timing: output does not depend on worker or thread count.
"""

from __future__ import annotations

import queue
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from caption_debias.image_files import ImageProblem
from caption_debias.image_source import downloads, parquet_samples, refs, tars
from caption_debias.image_source.roots import PARQUET_BUFFER, Root, files_of, resolve_root

T = TypeVar("T")
Result = Any  # T, or the row's ImageProblem
Job = Callable[[], list[tuple[int, Result]]]
ImageFn = Callable[[bytes, str], T]  # the caller's function: an image's bytes and its reference -> T


@dataclass
class FetchStats:
    """What a source read: opens and bytes per container (tar, parquet file), loose files and their bytes."""

    opened: Counter = field(default_factory=Counter)
    fetched: Counter = field(default_factory=Counter)
    files: int = 0
    file_bytes: int = 0


@dataclass
class _Plan:
    units: dict[tuple[str, str], dict[str, list[int]]] = field(default_factory=dict)  # (kind, path) -> name -> rows
    problems: dict[int, ImageProblem] = field(default_factory=dict)


class ImageSource:
    """The images under one root (a local folder or an fsspec URL); see the package docs."""

    def __init__(self, root: str | Root, *, threads: int = 1, downloads_index: downloads.Downloads | None = None):
        self.root = resolve_root(root)
        self.threads = threads
        self._files = files_of(self.root)
        self._downloads = downloads_index
        self._lock = threading.Lock()
        self.stats = FetchStats()

    def __getstate__(self) -> dict[str, Any]:  # workers count their own reads
        return {**self.__dict__, "_lock": None, "stats": FetchStats()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    # -- where a row's image is --------------------------------------------------------------

    def downloads(self) -> downloads.Downloads:
        """The index of img2dataset's output under the root (URL rows), built once: a driver that
        calls this before sending the source to its workers sends the index with it."""
        if self._downloads is None:
            self._downloads = downloads.build(self._files)
        return self._downloads

    def locate(self, image: object, key: object = None) -> refs.Ref:
        """The Ref of a row's image (a URL row: where img2dataset stored it, by `key`); ImageProblem when none."""
        ref = refs.parse(image)
        if ref.kind != refs.URL:
            return ref
        return refs.parse(self.downloads().image(key, ref.path))

    def container(self, image: object, key: object = None) -> str | None:
        """The tar or parquet file holding a row's image (what to split tasks by); None for a loose file or a problem."""
        try:
            return refs.container(self.locate(image, key))
        except ImageProblem:
            return None

    # -- reading ----------------------------------------------------------------------------

    def read(self, image: str, key: object = None) -> bytes:
        """Specification: one row's image bytes, or ImageProblem; a tar or parquet file opened for it alone."""
        ref = self.locate(image, key)
        if ref.kind == refs.FILE:
            return self._files.read(ref.path)
        module = tars if ref.kind == refs.TAR else parquet_samples
        with self._open(ref) as fh:
            return module.read_one(fh, ref.path, ref.member)

    def stream(
        self, images: Sequence[object], fn: ImageFn[T], keys: Sequence[object] | None = None, threads: int | None = None
    ) -> Iterator[tuple[int, T | ImageProblem]]:
        """(row index, fn(bytes, name) or the row's ImageProblem) for every row whose image is not None.

        `fn` gets the image's bytes and its reference (for messages); an ImageProblem it raises
        is that row's result, anything else propagates. `keys`: the rows' prepared keys (URL rows).
        `threads` > 1 reads loose files and applies `fn` on a pool, results still in read order.
        """
        plan = self._plan(images, keys)
        jobs = self._jobs(plan, fn)
        for done in _ordered(jobs, self.threads if threads is None else threads):
            yield from done

    def in_row_order(
        self, images: Sequence[object], fn: ImageFn[T], keys: Sequence[object] | None = None, threads: int | None = None
    ) -> Iterator[tuple[int, T | ImageProblem]]:
        """stream's results in row order: each held until the rows before it are out. Memory is the
        results read ahead of their turn: none when the rows list each tar's members in tar order
        (the img2dataset reader's rows, pack's), up to a tar's results when they do not (a URL
        table's rows against img2dataset's tars, written as downloads finished)."""
        wanted = (i for i, image in enumerate(images) if image is not None)
        early: dict[int, Any] = {}
        turn = next(wanted, None)
        for i, result in self.stream(images, fn, keys, threads):
            early[i] = result
            while turn is not None and turn in early:
                yield turn, early.pop(turn)
                turn = next(wanted, None)

    def map(
        self, images: Sequence[object], fn: ImageFn[T], keys: Sequence[object] | None = None, threads: int | None = None
    ) -> list[T | ImageProblem | None]:
        """stream's results in row order (None where the image is None): for small results (facts)."""
        out: list[Any] = [None] * len(images)
        for i, result in self.stream(images, fn, keys, threads):
            out[i] = result
        return out

    # -- the plan and its jobs ----------------------------------------------------------------

    def _plan(self, images: Sequence[object], keys: Sequence[object] | None) -> _Plan:
        plan = _Plan()
        for i, image in enumerate(images):
            if image is None:
                continue
            try:
                ref = self.locate(image, None if keys is None else keys[i])
            except ImageProblem as exc:
                plan.problems[i] = exc
                plan.units[("problem", str(i))] = {}
                continue
            unit = (ref.kind, ref.path)
            plan.units.setdefault(unit, {}).setdefault(ref.member, []).append(i)
        return plan

    def _jobs(self, plan: _Plan, fn: Callable[[bytes, str], Any]) -> Iterator[Job]:
        for (kind, path), names in plan.units.items():
            if kind == "problem":
                i = int(path)
                yield _done([(i, plan.problems[i])])
            elif kind == refs.FILE:
                yield self._file_job(path, names[""], fn)
            else:
                yield from self._container_jobs(refs.Ref(kind, path), names, fn)

    def _file_job(self, path: str, rows: list[int], fn) -> Job:
        def job() -> list[tuple[int, Result]]:
            try:
                data = self._files.read(path)
            except ImageProblem as exc:
                return [(i, exc) for i in rows]
            with self._lock:
                self.stats.files += 1
                self.stats.file_bytes += len(data)
            return [(i, result) for result in [_apply(fn, data, path)] for i in rows]

        return job

    def _open(self, ref: refs.Ref):
        buffer = PARQUET_BUFFER if ref.kind == refs.PARQUET else None
        fh = self._files.open(ref.path) if buffer is None else self._files.open(ref.path, buffer_size=buffer)
        self.stats.opened[ref.path] += 1
        return _Counted(fh, self.stats, ref.path)

    def _container_jobs(self, ref: refs.Ref, names: dict[str, list[int]], fn) -> Iterator[Job]:
        module = tars if ref.kind == refs.TAR else parquet_samples
        links: dict[str, str] = {}  # asked -> the link member that satisfies it
        try:
            counted = self._open(ref)
        except ImageProblem as exc:
            yield _done([(i, exc) for rows in names.values() for i in rows])
            return
        with counted as fh:
            for name, found in module.stream(fh, ref.path, list(names)):
                if isinstance(found, tars.LinkInside):
                    links[name] = found.member
                    continue
                yield _apply_job(fn, found, f"{ref.path}#{name}", names[name])
        if links:  # rare: tarfile resolves link members from the whole index, in a second open
            targets = self._read_links(ref, sorted(set(links.values())))
            for name, member in links.items():
                yield _apply_job(fn, targets[member], f"{ref.path}#{name}", names[name])

    def _read_links(self, ref: refs.Ref, members: list[str]) -> dict[str, bytes | ImageProblem]:
        try:
            with self._open(ref) as fh:
                return tars.read_links(fh, ref.path, members)
        except ImageProblem as exc:
            return dict.fromkeys(members, exc)


class _Counted:
    """A container's reader (the value of `with`) that adds what it fetched to the source's stats when closed."""

    def __init__(self, fh, stats: FetchStats, path: str):
        self.fh, self.stats, self.path = fh, stats, path

    def __enter__(self):
        return self.fh

    def __exit__(self, *exc) -> None:
        self.stats.fetched[self.path] += self.fh.raw.fetched
        self.fh.close()


def _apply(fn: Callable[[bytes, str], Any], data: bytes | ImageProblem, name: str) -> Result:
    if isinstance(data, ImageProblem):
        return data
    try:
        return fn(data, name)
    except ImageProblem as exc:
        return exc


def _done(results: list[tuple[int, Result]]) -> Job:
    return lambda: results


def _apply_job(fn, data: bytes | ImageProblem, name: str, rows: list[int]) -> Job:
    def job() -> list[tuple[int, Result]]:
        result = _apply(fn, data, name)
        return [(i, result) for i in rows]

    return job


def _ordered(jobs: Iterable[Job], threads: int) -> Iterator[list[tuple[int, Result]]]:
    """Each job's results in the jobs' order. With threads > 1 the jobs are made (tars read) on a
    thread of their own and run on a pool, at most 2 x threads ahead of the caller."""
    if threads <= 1:
        for job in jobs:
            yield job()
        return
    ahead = threading.Semaphore(2 * threads)
    made: queue.Queue = queue.Queue()
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="images") as pool:
        maker = threading.Thread(target=_make, args=(jobs, pool, made, ahead, stop), name="images-reader", daemon=True)
        maker.start()
        try:
            while (item := made.get()) is not _END:
                if isinstance(item, BaseException):
                    raise item
                yield item.result()
                ahead.release()
        finally:
            stop.set()
            ahead.release()  # a maker waiting for room sees the stop
            maker.join()


_END = object()


def _make(jobs: Iterable[Job], pool: ThreadPoolExecutor, made: queue.Queue, ahead, stop: threading.Event) -> None:
    """Submit each job as room frees up; _END (or the exception that ended the jobs) last."""
    try:
        for job in jobs:
            ahead.acquire()
            if stop.is_set():
                return
            made.put(pool.submit(job))
    except BaseException as exc:  # noqa: BLE001  handed to the caller's thread
        made.put(exc)
        return
    finally:
        close = getattr(jobs, "close", None)
        if close is not None:
            close()
    made.put(_END)
