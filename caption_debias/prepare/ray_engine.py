"""`prepare --engine ray`: the local engine's chunk function run as Ray Data map_batches tasks.

One implementation: the driver runs the same ordered stream as the local engine (readers, key
assignment with '#N' suffixes, chunk boundaries), so keys and rejects cannot depend on the
engine; each window of chunks becomes a Ray dataset with one block per chunk, and map_batches
runs `run.finish_chunk` on it: the text steps, the atomic shard write and the resume sidecar.
Results come back as sidecars and are merged in chunk order exactly as in the local engine.
On a cluster the output folder must be on a filesystem every node sees (NFS, a mounted bucket).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from caption_debias.errors import UserError
from caption_debias.prepare.distributor import Ready
from caption_debias.worker_life import reap_descendants_on_death

# One driver feeds about 24 workers (docs/benchmarks.md, Scale); bigger windows would only
# cost driver memory (three windows of --shard-rows records each are held at once).
MAX_WINDOW = 64
_ERROR = "error"  # a sidecar holding only this: the task's UserError message


def _connect(address: str | None, workers: int) -> bool:
    """Join the cluster at `address` (or $RAY_ADDRESS), or start a local runtime; True when we started it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise UserError("--engine ray needs Ray Data: pip install 'caption-debias[ray]' (or 'ray[data]')") from None

    if ray.is_initialized():  # a caller (a notebook, a test) already chose the runtime
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        _check_reachable(address)
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot connect to Ray at {address or 'a new local runtime'}: {exc}") from None
    return True


def _check_reachable(address: str) -> None:
    """Fail in seconds on a wrong HOST:PORT; ray.init would retry for minutes before giving up."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():  # "auto", "local" and other forms are Ray's to resolve
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise UserError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); is `ray start --head` running there?"
        ) from None


def _quiet_data_context() -> None:
    """Ray Data's own progress bars would fight prepare's progress line."""
    import ray.data

    logging.getLogger("ray.data").setLevel(logging.ERROR)  # before the switch: it logs a notice about itself
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.verbose_stats_logs = False


def _chunk_task(fn: Callable[[Any], dict]) -> Callable[[dict], dict]:
    """map_batches function: unpickle each task, run `fn`, return its sidecar as JSON text."""
    driver_cwd = os.getcwd()

    def apply(batch: dict) -> dict:
        import numpy as np

        # A relative -o means the driver's folder; on a node that mounts the same path, run there.
        if os.getcwd() != driver_cwd and os.path.isdir(driver_cwd):
            os.chdir(driver_cwd)
        sides = []
        for raw in batch["task"]:
            try:
                side = fn(pickle.loads(raw))
            except UserError as exc:  # e.g. a full disk: the driver raises it as the one line it is
                side = {_ERROR: str(exc)}
            sides.append(json.dumps(side, ensure_ascii=False))
        return {"i": np.asarray(batch["i"]), "side": np.asarray(sides, dtype=object)}

    return apply


def _run_window(fn: Callable[[Any], dict], window: list[Any]) -> Iterator[Any]:
    import ray.data

    todo = [
        {"i": i, "task": pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)}
        for i, item in enumerate(window)
        if not isinstance(item, Ready)
    ]
    done: dict[int, Any] = {}
    if todo:
        ds = ray.data.from_items(todo, override_num_blocks=len(todo))  # one chunk per block: spread over the CPUs
        ds = ds.map_batches(_chunk_task(fn), batch_size=1, batch_format="numpy", num_cpus=1)
        for row in ds.iter_rows():
            side = json.loads(row["side"])
            if _ERROR in side:
                raise UserError(side[_ERROR])
            done[int(row["i"])] = side
    for i, item in enumerate(window):
        yield item.value if isinstance(item, Ready) else done[i]


def _windows(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    window: list[Any] = []
    for item in items:
        window.append(item)
        if len(window) >= size:
            yield window
            window = []
    if window:
        yield window


def _read_ahead(windows: Iterator[list[Any]]) -> Iterator[list[Any]]:
    """The next window is read on a thread while Ray processes the current one.

    Without it the cluster would idle while the driver reads (the driver reads about 25 times
    faster than one worker processes, see docs/benchmarks.md, so on a large cluster the two
    take comparable time). Reader errors (a UserError) are raised here, in the caller's thread.
    """
    slots: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def put(entry: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def fill() -> None:
        try:
            for window in windows:
                if not put(("window", window)):
                    return
            put(("end", None))
        except BaseException as exc:  # handed to the consumer, which raises it
            put(("error", exc))

    threading.Thread(target=fill, name="prepare-read-ahead", daemon=True).start()
    try:
        while True:
            kind, value = slots.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value
    finally:
        stop.set()


def ray_ordered_map(
    fn: Callable[[Any], dict], items: Iterable[Any], workers: int, max_in_flight: int, address: str | None = None
) -> Iterator[Any]:
    """Drop-in for distributor.ordered_map: fn(item) per item via Ray Data, results in input order.

    Chunks go to Ray in windows of 2 x cluster CPUs (at most MAX_WINDOW); the driver holds at
    most three windows of records (in work, read ahead, being read), so memory stays flat on a
    billion-row input.
    """
    with reap_descendants_on_death():  # a local runtime's processes die with the command, even by kill -9
        started = _connect(address, workers)
        try:
            import ray

            _quiet_data_context()
            cpus = int(ray.cluster_resources().get("CPU", 1))
            window_size = max(max_in_flight, min(2 * cpus, MAX_WINDOW))
            for window in _read_ahead(_windows(items, window_size)):
                yield from _run_window(fn, window)
        finally:
            if started:
                import ray

                ray.shutdown()


@contextmanager
def ray_runtime(address: str | None, workers: int) -> Iterator[None]:
    """One Ray runtime for a whole run (curate's map, group-bys and write; score's actor pool): joined
    or started here, shut down if ours."""
    with reap_descendants_on_death():  # a local runtime's processes die with the command, even by kill -9
        started = _connect(address, workers)
        try:
            _quiet_data_context()
            yield
        finally:
            if started:
                import ray

                ray.shutdown()
