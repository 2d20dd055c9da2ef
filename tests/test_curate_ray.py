"""curate --engine ray: the per-shard steps and the key group-bys as Ray tasks give the local engine's
output byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray")

from curate_fixtures import make_world

from caption_debias.curate.options import CurateOptions
from caption_debias.curate.run import curate


@pytest.mark.slow  # a Ray runtime: over 20 s on 2 shared cores
def test_ray_engine_matches_local_engine(tmp_path, ray_runtime):
    world = make_world(tmp_path / "world")
    opts = dict(image_root=str(world["images"]), decontaminate=[f"urban1k={world['eval']}"], quiet=True)
    local = curate([world["prepared"]], tmp_path / "local", CurateOptions(**opts))
    ray_run = curate([world["prepared"]], tmp_path / "ray", CurateOptions(**opts, engine="ray", workers=2))
    assert ray_run["shards"] == local["shards"] and ray_run["counts"] == local["counts"]
    assert (tmp_path / "ray/removed.jsonl").read_bytes() == (tmp_path / "local/removed.jsonl").read_bytes()
    assert local["counts"]["removed_by_reason"]["near_duplicate_caption"] == 2
    # a run resumed with the other engine reuses every shard
    again = curate([world["prepared"]], tmp_path / "local", CurateOptions(**opts, engine="ray"))
    assert again["shards"] == local["shards"]


def _key_files(folder: Path, n_files: int = 5, rows: int = 300) -> list[str]:
    """Parquet files of global orders and two key columns (integers, bytes with nulls), as curate's signals hold."""
    import numpy as np
    import polars as pl

    folder.mkdir()
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n_files):
        ints = rng.integers(0, 300, rows)
        pl.DataFrame(
            {
                "order": np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
                "band": pl.Series(ints.astype(np.uint64)),
                "hash": pl.Series([bytes([x % 13, x % 7]) if x % 11 else None for x in ints], dtype=pl.Binary),
            }
        ).write_parquet(folder / f"part-{i:05d}.parquet")
        paths.append(str(folder / f"part-{i:05d}.parquet"))
    return paths


@pytest.mark.slow  # a Ray runtime
def test_the_key_group_by_on_ray_gives_the_local_frames(tmp_path, ray_runtime):
    from caption_debias import engines
    from caption_debias.errors import UserError

    files = _key_files(tmp_path / "keys")
    local = engines.repeated_keys(CurateOptions())(files, ["band", "hash"])
    on_ray = engines.repeated_keys(CurateOptions(engine="ray"))(files, ["band", "hash"])
    assert local["band"].height > 0 and local["hash"].height > 0
    for column in ("band", "hash"):
        assert on_ray[column].equals(local[column]), column  # rows, order, key values and types
        assert (local[column]["key"].value_counts()["count"] >= 2).all()  # only repeated keys come back
    Path(files[2]).write_bytes(b"torn")
    with pytest.raises(UserError, match=r"part-00002.parquet: cannot read"):
        engines.repeated_keys(CurateOptions(engine="ray"))(files, ["band"])
