"""`curate --engine ray`: the per-shard steps as Ray Data tasks, the key group-bys as Ray Data shuffles.

The signals and write steps run through prepare's Ray engine (`ray_ordered_map`): one block
per input shard, the same worker functions as the local pool. The global step's heavy part,
finding the rows whose exact key or LSH band key occurs more than once, is a Ray Data
group-by over the signal files (a hash shuffle on the cluster); the driver then runs the
funnel on those rows only, exactly as the local engine does, so the output is identical.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from caption_debias.curate.dedup import SignalTable


@contextmanager
def ray_runtime(address: str | None, workers: int) -> Iterator[None]:
    """One Ray runtime for the whole run (map, group-bys, write): joined or started here, shut down if ours."""
    from caption_debias.prepare.ray_engine import _connect, _quiet_data_context

    started = _connect(address, workers)
    try:
        _quiet_data_context()
        yield
    finally:
        if started:
            import ray

            ray.shutdown()


def ray_shared_keys(table: SignalTable, column: str):
    """(order, key) of every row whose `column` value occurs in more than one row, via Ray Data."""
    import numpy as np
    import polars as pl
    import ray.data

    if not table.files:
        return pl.DataFrame({"order": [], "key": []})
    ds = ray.data.read_parquet(table.files, columns=["order", column]).filter(lambda row: row[column] is not None)

    def repeated(group):
        return group if len(group["order"]) >= 2 else {"order": np.zeros(0, np.int64), column: group[column][:0]}

    ds = ds.groupby(column).map_groups(repeated, batch_format="numpy")
    parts = [pl.from_arrow(batch) for batch in ds.iter_batches(batch_format="pyarrow")]
    if not parts:
        return pl.DataFrame({"order": np.zeros(0, np.int64), "key": []}).cast(
            {"key": table.scan().collect_schema()[column]}
        )
    return pl.concat(parts).select("order", pl.col(column).alias("key")).sort("order")
