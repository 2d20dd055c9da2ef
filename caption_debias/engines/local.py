"""The local engine: an ordered parallel map over a process pool, a bounded number of tasks in flight (memory stays flat)."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable, Iterator


class Ready:
    """An item whose result is already known (a finished task's sidecar on resume): passed through in order."""

    def __init__(self, value: Any) -> None:
        self.value = value


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int, max_in_flight: int) -> Iterator[Any]:
    """fn(item) for each item, results in input order.

    workers == 1 runs in this process (no pickling, easy to debug). Otherwise a process pool
    ('spawn': safe with the progress bar's thread) gets at most `max_in_flight` items at once,
    so a slow consumer or a fast reader never piles chunks up in memory. Its workers die with
    this process (worker_life.bind_to_parent).
    """
    if workers <= 1:
        for item in items:
            yield item.value if isinstance(item, Ready) else fn(item)
        return
    import multiprocessing  # here, not at the top: a --workers 1 run never pays for its imports
    import os
    from concurrent.futures import Future, ProcessPoolExecutor

    from caption_debias.worker_life import bind_to_parent

    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=bind_to_parent, initargs=(os.getpid(),))
    with pool:
        pending: deque = deque()
        for item in items:
            if isinstance(item, Ready):
                done: Future = Future()
                done.set_result(item.value)
                pending.append(done)
            else:
                pending.append(pool.submit(fn, item))
            if len(pending) >= max_in_flight:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


KEY_COLUMNS_PER_SCAN = 4  # key columns flagged per scan of the files (bounds the scan's memory)


def repeated_keys(files: list[str], columns: list[str], id_column: str = "order") -> dict[str, Any]:
    """Per column, the rows (`id_column` and "key", a polars DataFrame) whose value occurs in more than one
    row of the Parquet `files` (nulls never count): the key group-by, in this process.

    One lazy scan flags several columns at once (`is_duplicated`, a hash pass each, run in
    parallel); only the flagged rows' keys are kept. The Ray twin: `engines.ray.ray_repeated_keys`.
    """
    import polars as pl

    from caption_debias import storage

    out = {}
    for i in range(0, len(columns), KEY_COLUMNS_PER_SCAN):
        group = columns[i : i + KEY_COLUMNS_PER_SCAN]
        with storage.reading(files):  # a file that cannot be decoded: one line naming it
            flagged = (
                storage.scan_parquet(files)
                .select(id_column, *[pl.when(pl.col(c).is_duplicated()).then(pl.col(c)).alias(c) for c in group])
                .filter(pl.any_horizontal([pl.col(c).is_not_null() for c in group]))
                .collect()
            )
        for c in group:
            out[c] = flagged.select(id_column, pl.col(c).alias("key")).drop_nulls("key")
    return out
