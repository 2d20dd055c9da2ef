"""score --engine ray: the model in a Ray Data actor pool gives the local engine's shards byte for byte."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("ray")
pytest.importorskip("open_clip")

from score_fixtures import score_opts

from caption_debias.score.run import score_folder


@pytest.mark.slow
def test_ray_engine_matches_local_engine(score_world, tmp_path, ray_runtime):
    # both engines compute the shards in fresh processes (spawned workers, Ray actors), the reference here
    local = score_folder([score_world["prepared"]], tmp_path / "local", score_opts(score_world, workers=2))
    ray_run = score_folder(
        [score_world["prepared"]], tmp_path / "ray", score_opts(score_world, engine="ray", workers=2)
    )
    assert ray_run["shards"] == local["shards"] and ray_run["counts"] == local["counts"]
    assert ray_run["scoring"] == local["scoring"]
    for s in local["shards"]:
        assert (tmp_path / "ray" / s["path"]).read_bytes() == (tmp_path / "local" / s["path"]).read_bytes()
    # a run resumed with the other engine reuses every shard
    sides = sorted((tmp_path / "local/.score/shards").glob("*.json"))
    before = [p.stat().st_mtime_ns for p in sides]
    again = score_folder(
        [score_world["prepared"]], tmp_path / "local", score_opts(score_world, engine="ray", workers=2)
    )
    assert again["shards"] == local["shards"]
    assert [p.stat().st_mtime_ns for p in sides] == before
    assert json.loads((tmp_path / "ray/manifest.json").read_text())["options"]["engine"] == "ray"
