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
