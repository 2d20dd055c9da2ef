"""`curate --engine ray`: the per-shard steps as Ray Data tasks, the key group-bys as Ray Data shuffles.

The signals and write steps run through the Ray engine (`caption_debias/engines/ray.py`): one
block per input shard, the same worker functions as the local pool. The global step's heavy part,
finding the rows whose exact key or LSH band key occurs more than once, is a Ray Data
group-by over the signal files (a hash shuffle on the cluster); the driver then runs the
funnel on those rows only, exactly as the local engine does, so the output is identical.
"""

from __future__ import annotations

from caption_debias.curate.dedup import SignalTable


def ray_shared_keys(table: SignalTable, columns: list[str]) -> dict:
    """Per column, (order, key) of every row whose value occurs in more than one row, via Ray Data.

    Tasks read the key columns of one signals file each (the driver reads none) and emit
    (column number + key bytes, order) rows; one Ray Data group-by (a hash shuffle on the
    cluster) counts every key of every column at once, and a second pass keeps the rows whose
    key repeats.
    """
    import polars as pl
    import pyarrow as pa
    import ray.data

    schema = table.scan().collect_schema()

    def empty(c: str):
        return pl.DataFrame({"order": [], "key": []}, schema={"order": pl.Int64, "key": schema[c]})

    if not table.files:
        return {c: empty(c) for c in columns}

    def read(batch: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        from caption_debias import storage

        parts = []
        for path in batch.column("path").to_pylist():
            t = storage.read_table(path, columns=["order", *columns])
            for i, c in enumerate(columns):
                col = t.column(c).combine_chunks()
                valid = pc.is_valid(col)
                keys = col.filter(valid)
                if pa.types.is_integer(keys.type):
                    raw = keys.to_numpy().astype("<u8").tobytes()
                    values = [raw[j : j + 8] for j in range(0, len(raw), 8)]
                else:
                    values = keys.to_pylist()
                prefix = bytes([i])
                parts.append(
                    pa.table(
                        {
                            "k": pa.array([prefix + v for v in values], pa.binary()),
                            "order": t.column("order").filter(valid),
                        }
                    )
                )
        return pa.concat_tables(parts)

    ds = ray.data.from_items([{"path": f} for f in table.files], override_num_blocks=len(table.files))
    long = ds.map_batches(read, batch_format="pyarrow", batch_size=1).materialize()
    counts = long.groupby("k").count()
    repeated = [r["k"] for r in counts.filter(lambda r: r["count()"] >= 2).iter_rows()]
    out = {c: empty(c) for c in columns}
    if not repeated:
        return out
    wanted = pa.array(repeated, pa.binary())

    def keep(batch: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        return batch.filter(pc.is_in(batch.column("k"), value_set=wanted))

    rows = [
        pl.from_arrow(b)
        for b in long.map_batches(keep, batch_format="pyarrow").iter_batches(batch_format="pyarrow")
        if b.num_rows
    ]
    if not rows:
        return out
    df = pl.concat(rows)
    df = df.with_columns(pl.col("k").bin.slice(0, 1).alias("col"), pl.col("k").bin.slice(1).alias("key"))
    for i, c in enumerate(columns):
        part = df.filter(pl.col("col") == bytes([i])).select("order", "key").sort("order")
        if schema[c].is_integer():
            keys = part["key"].to_list()
            part = part.with_columns(pl.Series("key", [int.from_bytes(k, "little") for k in keys], dtype=pl.UInt64))
        out[c] = part
    return out
