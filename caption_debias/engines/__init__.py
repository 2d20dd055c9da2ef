"""Engines: how a stage's tasks run. One call for the map, one for the runtime around the run.

    with engines.runtime(options):                     # Ray: joined or started for the run; local: nothing
        for side in engines.mapper(options)(fn, tasks):  # fn(task) per task, sidecars in task order
            ...

`options` is any stage's options object (`engine`, `workers`, `max_in_flight`, `ray_address`).
`local.py`: this process (--workers 1) or a spawned process pool; `ray.py`: Ray tasks, or
an actor pool when the stage gives `Actors` (score: the model loaded once per actor). Both
pass `Ready` items (tasks finished by an earlier run) through in order, and neither changes
a byte of the output: a task's work is the same function on either. `repeated_keys(options)`:
the key group-by (curate's duplicates), polars here or a hash-partitioned shuffle on Ray.
Nothing outside this package imports Ray (tests/test_import_layers.py).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, ContextManager, Iterable, Iterator

from caption_debias.engines import local
from caption_debias.engines.local import Ready, ordered_map

__all__ = ["Actors", "GroupBy", "Mapper", "Ready", "mapper", "repeated_keys", "runtime"]

Mapper = Callable[[Callable[[Any], Any], Iterable[Any]], Iterator[Any]]  # (fn, tasks) -> results in task order
GroupBy = Callable[[list[str], list[str]], dict[str, Any]]  # (Parquet files, key columns) -> {column: rows}


@dataclass(frozen=True)
class Actors:
    """Workers that hold something costly for the whole run: `setup` runs once in each (score loads its model).

    On Ray an actor pool of --workers actors, each sized to fit a node (`gpu`: one GPU each);
    the local engine needs nothing of it (its worker processes keep what a task loaded).
    """

    setup: Callable[[], Any] | None = None
    gpu: bool = False


def mapper(options: Any, actors: Actors | None = None) -> Mapper:
    """The stage's map over its tasks: the local process pool, or Ray (--engine ray), run inside `runtime`."""
    if options.engine == "ray":
        from caption_debias.engines import ray as ray_engine

        if actors is not None:
            return partial(ray_engine.ray_actor_map, workers=options.workers, setup=actors.setup, gpu=actors.gpu)
        return partial(ray_engine.ray_ordered_map, max_in_flight=options.max_in_flight * options.workers)
    return partial(ordered_map, workers=options.workers, max_in_flight=options.max_in_flight * options.workers)


def repeated_keys(options: Any) -> GroupBy:
    """The key group-by over Parquet files: per column, the rows whose key repeats (polars here; with
    --engine ray, tasks that hash-partition the keys on the cluster). Both give the same frames."""
    if options.engine == "ray":
        from caption_debias.engines import ray as ray_engine

        return ray_engine.ray_repeated_keys
    return local.repeated_keys


def runtime(options: Any) -> ContextManager[Any]:
    """What the engine needs around a whole run: a Ray runtime joined or started (and stopped if started here)."""
    if options.engine == "ray":
        from caption_debias.engines.ray import ray_runtime

        return ray_runtime(options.ray_address, options.workers)
    return nullcontext()
