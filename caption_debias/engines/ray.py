"""The Ray engine: a stage's tasks as Ray tasks, or in an actor pool, results in task order; the key group-by.

One implementation of the work: each task runs the same function as in the local engine
(prepare's chunk, curate's signals and write steps, score's shard, pack's tar), which writes
its output and sidecar itself; only the sidecars travel back, and the driver merges them in
task order exactly as it does for the local engine, so the output cannot depend on the engine.

- `ray_ordered_map`: one `ray.remote` task per stage task, a bounded number running, a new one
  started as soon as any finishes (`ray.wait`); plain tasks, not Ray Data, by measurement
  (docs/benchmarks.md, "Ray engine"): Ray Data built a dataset per window and a window waited
  for its slowest task;
- `ray_actor_map`: one Ray Data actor pool of --workers actors for the whole run, each running a
  `setup` once (score: the model loaded once per actor), each sized to fit a node of the cluster;
- `ray_runtime`: the one runtime a run joins (--ray-address, $RAY_ADDRESS) or starts and stops;
- `ray_repeated_keys`: the local engine's `repeated_keys` (curate's duplicate keys) as a shuffle of
  tasks: keys hash-partitioned, one reducer per part, only the rows whose key repeats sent back.

On a cluster the output folder must be on a filesystem every node sees (NFS, a mounted bucket,
an object store URL).
"""

from __future__ import annotations

import json
import logging
import math
import os
import pickle
from collections import deque
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator

from caption_debias.engines.local import Ready
from caption_debias.errors import UserError
from caption_debias.worker_life import reap_descendants_on_death

# One driver feeds about 24 workers (docs/benchmarks.md, Scale); more tasks running at once would
# only cost memory (at most four windows of tasks are held, running or waiting for their turn).
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
    refused = getattr(ray.exceptions, "AuthenticationError", ConnectionError)  # Ray >= 2.52
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError, refused) as exc:
        where = address or "a new local runtime"
        if _token_refused(exc, refused):
            raise UserError(f"cannot connect to Ray at {where}: {TOKEN_HINT}") from None
        raise UserError(f"cannot connect to Ray at {where}: {exc}") from None
    return True


def _token_refused(exc: BaseException | None, refused: type) -> bool:
    """Whether the cluster refused this process's authentication token (Ray wraps it in ConnectionError
    and RuntimeError, the last with the refusal only in its text)."""
    while exc is not None:
        if isinstance(exc, refused) or "InvalidAuthToken" in str(exc) or "Unauthenticated" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# What a driver needs to join a cluster whose head runs token authentication (Ray's default from 2.52 on).
TOKEN_HINT = (
    "the cluster asks for its authentication token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to a copy "
    "of the head's token file (or put it in ~/.ray/auth_token); see docs/scale.md"
)


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


def _apply(fn: Callable[[Any], dict], batch: dict, error: str | None = None) -> dict:
    """Run `fn` on each pickled task of a map_batches batch; each sidecar back as JSON text (a UserError as its line)."""
    import numpy as np

    sides = []
    for raw in batch["task"]:
        if error is not None:  # the actor's setup failed: every task reports it
            sides.append(json.dumps({_ERROR: error}))
            continue
        try:
            side = fn(pickle.loads(raw))
        except UserError as exc:  # e.g. a full disk: the driver raises it as the one line it is
            side = {_ERROR: str(exc)}
        sides.append(json.dumps(side, ensure_ascii=False))
    return {"i": np.asarray(batch["i"]), "side": np.asarray(sides, dtype=object)}


def _in_driver_folder(driver_cwd: str) -> None:
    """A relative -o means the driver's folder; on a node that mounts the same path, run there."""
    if os.getcwd() != driver_cwd and os.path.isdir(driver_cwd):
        os.chdir(driver_cwd)


class TaskActor:
    """An actor of the pool: `setup` once (a UserError is reported with each of its tasks), then `fn` per task."""

    def __init__(self, fn: Callable[[Any], dict], setup: Callable[[], Any] | None, cwd: str) -> None:
        _in_driver_folder(cwd)
        self.fn, self.error = fn, None
        try:
            if setup is not None:
                setup()
        except UserError as exc:
            self.error = str(exc)

    def __call__(self, batch: dict) -> dict:
        return _apply(self.fn, batch, self.error)


def _todo(items: list[Any]) -> list[dict[str, Any]]:
    """The rows of a Ray dataset: each task not already done, pickled, with its position."""
    return [
        {"i": i, "task": pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)}
        for i, item in enumerate(items)
        if not isinstance(item, Ready)
    ]


def _in_order(items: list[Any], rows: Iterator[dict]) -> Iterator[Any]:
    """Each item's sidecar in item order: a Ready one's own, the others' as Ray returns them (in any order)."""
    done: dict[int, Any] = {}
    for i, item in enumerate(items):
        if isinstance(item, Ready):
            yield item.value
            continue
        while i not in done:
            row = next(rows)
            side = json.loads(row["side"])
            if _ERROR in side:
                raise UserError(side[_ERROR])
            done[int(row["i"])] = side
        yield done.pop(i)


def _run_task(fn: Callable[[Any], dict], task: Any, driver_cwd: str) -> dict:
    """One Ray task: `fn(task)`, its sidecar back (a UserError as its line: a task that raises makes Ray print a traceback)."""
    _in_driver_folder(driver_cwd)
    try:
        return fn(task)
    except UserError as exc:
        return {_ERROR: str(exc)}


def ray_ordered_map(fn: Callable[[Any], dict], items: Iterable[Any], max_in_flight: int) -> Iterator[Any]:
    """fn(item) per item as plain Ray tasks (`ray.remote`, `ray.wait`), results in input order (the local
    engine's `ordered_map`).

    Runs inside `ray_runtime`. At most a window of tasks run at once (2 x cluster CPUs, at
    most MAX_WINDOW, at least `max_in_flight`): a new one starts as soon as any finishes, so
    no task waits for the slowest of a window. Results wait in the object store until their
    turn; the driver holds at most 4 windows of tasks, so memory stays flat.
    """
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))
    window = max(max_in_flight, min(2 * cpus, MAX_WINDOW))
    run = ray.remote(num_cpus=1)(_run_task)
    fn_ref, cwd = ray.put(fn), os.getcwd()  # the function shipped once, not with every task
    pending: deque[Any] = deque()  # Ready items and task refs, in item order
    running: set[Any] = set()

    def heads() -> Iterator[Any]:
        while pending and (isinstance(pending[0], Ready) or pending[0] not in running):
            head = pending.popleft()
            side = head.value if isinstance(head, Ready) else ray.get(head)
            if _ERROR in side:
                raise UserError(side[_ERROR])
            yield side

    for item in items:
        if isinstance(item, Ready):
            pending.append(item)
        else:
            ref = run.remote(fn_ref, item, cwd)
            pending.append(ref)
            running.add(ref)
        while len(running) >= window or (running and len(pending) >= 4 * window):
            done, _ = ray.wait(list(running), num_returns=1)
            running.difference_update(done)
            yield from heads()
        yield from heads()
    while pending:
        if running:
            done, _ = ray.wait(list(running), num_returns=1)
            running.difference_update(done)
        yield from heads()


def ray_actor_map(
    fn: Callable[[Any], dict],
    items: Iterable[Any],
    workers: int,
    setup: Callable[[], Any] | None = None,
    gpu: bool = False,
) -> Iterator[Any]:
    """fn(item) per item in a Ray Data pool of `workers` actors (each runs `setup` once first), in input order.

    Runs inside `ray_runtime`. Every task goes into one dataset (tasks are small: the work
    they name is read by the actor), so the pool lives for the whole run; each actor asks for
    what `actor_resources` finds a node can give, so --workers actors fit the cluster.
    """
    import ray.data

    items = list(items)
    todo = _todo(items)
    rows: Iterator[dict] = iter(())
    if todo:
        ds = ray.data.from_items(todo, override_num_blocks=len(todo))
        ds = ds.map_batches(
            TaskActor,
            fn_constructor_kwargs={"fn": fn, "setup": setup, "cwd": os.getcwd()},
            batch_size=1,
            batch_format="numpy",
            concurrency=min(workers, len(todo)),
            **actor_resources(workers, gpu),
        )
        rows = iter(ds.iter_rows())
    yield from _in_order(items, rows)


def _nodes() -> list[dict[str, float]]:
    import ray

    return [n["Resources"] for n in ray.nodes() if n.get("Alive")]


def cpus_per_actor(node_cpus: list[float], workers: int) -> float:
    """The most CPUs each of `workers` actors can ask for with all of them placed on these nodes.

    Whole CPUs when there are enough (an actor on one node cannot use another node's CPUs, so
    the cluster's total divided by the actors is not enough to know), else the largest 1/j
    share that still places them all (more actors than CPUs: they share).
    """
    for per in range(int(sum(node_cpus) // max(workers, 1)), 0, -1):
        if sum(int(n // per) for n in node_cpus) >= workers:
            return float(per)
    for j in range(2, 1001):
        if sum(math.floor(n * j) for n in node_cpus) >= workers:
            return math.floor(10_000 / j) / 10_000  # Ray keeps resource amounts to 4 decimals
    raise UserError(f"--workers {workers}: the Ray cluster has no CPU for them ({sum(node_cpus):g} CPUs)")


def actor_resources(workers: int, gpu: bool, nodes: list[dict[str, float]] | None = None) -> dict[str, float]:
    """num_cpus / num_gpus of each of `workers` actors, from what the cluster's alive nodes have (`nodes`:
    their resources, as ray.nodes() gives them).

    With `gpu`: one GPU each (a node's CPUs shared among its GPUs); more actors than the
    cluster has GPUs would wait forever, so that is one line instead.
    """
    nodes = _nodes() if nodes is None else nodes
    if not gpu:
        return {"num_cpus": cpus_per_actor([r.get("CPU", 0.0) for r in nodes], workers), "num_gpus": 0}
    with_gpus = [r for r in nodes if r.get("GPU", 0.0) >= 1]
    total = sum(int(r["GPU"]) for r in with_gpus)
    if total < workers:
        raise UserError(f"--device cuda --workers {workers}: one GPU per actor, and the Ray cluster has {total}")
    share = min(r.get("CPU", 0.0) / int(r["GPU"]) for r in with_gpus)
    return {"num_cpus": float(int(share)) if share >= 1 else share, "num_gpus": 1}


@contextmanager
def ray_runtime(address: str | None, workers: int) -> Iterator[None]:
    """One Ray runtime for a whole run (every map of the stage, curate's group-bys): joined or
    started here (a local one with `workers` CPUs), shut down if ours."""
    with reap_descendants_on_death():  # a local runtime's processes die with the command, even by kill -9
        started = _connect(address, workers)
        try:
            _quiet_data_context()
            yield
        finally:
            if started:
                import ray

                ray.shutdown()


# -- the key group-by: tasks hash-partition the keys, one reducer per part keeps the repeated ones --------------


def _split_keys(files: list[str], columns: list[str], id_column: str, parts: int) -> tuple[dict[str, Any], ...]:
    """Map side: each column's non-null (id, key) rows of `files`, split into `parts` by a hash of the key."""
    import polars as pl

    from caption_debias import storage

    try:
        with storage.reading(files):  # a file that cannot be decoded: one line naming it
            table = storage.scan_parquet(files).select(id_column, *columns).collect()
    except UserError as exc:  # handed on as its line: a task that raises makes Ray print its traceback
        return tuple({_ERROR: str(exc)} for _ in range(parts))
    pieces: tuple[dict[str, Any], ...] = tuple({} for _ in range(parts))
    for c in columns:
        rows = table.select(id_column, pl.col(c).alias("key")).drop_nulls("key")
        part = (rows["key"].hash(seed=0) % parts).alias("part")  # a fixed seed: a key's part is the same on every node
        split = rows.with_columns(part).partition_by("part", include_key=False, as_dict=True)
        for p in range(parts):
            pieces[p][c] = split.get((p,), rows.clear())
    return pieces


def _repeated_in(columns: list[str], *pieces: dict[str, Any]) -> dict[str, Any]:
    """Reduce side: one part of every map task's keys; the rows whose key occurs more than once."""
    import polars as pl

    failed = next((p for p in pieces if _ERROR in p), None)
    if failed is not None:
        return failed
    return {c: pl.concat([p[c] for p in pieces]).filter(pl.col("key").is_duplicated()) for c in columns}


def _groups(files: list[str], n: int) -> list[list[str]]:
    """`files` in `n` runs of neighbours, as even as can be."""
    size, extra = divmod(len(files), n)
    bounds = [i * size + min(i, extra) for i in range(n + 1)]
    return [files[bounds[i] : bounds[i + 1]] for i in range(n)]


def ray_repeated_keys(files: list[str], columns: list[str], id_column: str = "order") -> dict[str, Any]:
    """The local engine's `repeated_keys` on the cluster, the same frames (sorted by `id_column`).

    Runs inside `ray_runtime`. Map tasks (one per run of neighbouring files, at most 4 per CPU)
    read the key columns and hash-partition each column's keys into one part per CPU; one
    reduce task per part keeps the rows whose key repeats. Only those rows reach the driver,
    streamed as each part finishes: no key list, no count per key. A reducer holds one part
    of the keys, a map task its files' key columns.
    """
    import polars as pl
    import ray

    from caption_debias.engines.local import repeated_keys

    if not files:
        return repeated_keys(files, columns, id_column)
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    parts = min(cpus, 64)
    split = ray.remote(_split_keys).options(num_returns=parts, num_cpus=1)
    maps = [split.remote(group, columns, id_column, parts) for group in _groups(files, min(len(files), 4 * cpus))]
    if parts == 1:  # one return is a ref, not a list of them
        maps = [[m] for m in maps]
    reduce = ray.remote(_repeated_in).options(num_cpus=1)
    pending = [reduce.remote(columns, *[m[p] for m in maps]) for p in range(parts)]
    found: dict[str, list[Any]] = {c: [] for c in columns}
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        part = ray.get(done[0])
        if _ERROR in part:
            raise UserError(part[_ERROR])
        for c in columns:
            found[c].append(part[c])
    return {c: pl.concat(frames).sort(id_column) for c, frames in found.items()}
