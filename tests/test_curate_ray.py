"""curate --engine ray: the per-shard steps as Ray Data tasks and the key group-bys as Ray Data shuffles
give the local engine's output byte for byte."""

from __future__ import annotations

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
