"""prepare --engine ray: Ray Data tasks running the local engine's chunk function, same output."""

from __future__ import annotations

import json
import os

import pytest

from caption_debias.dataset import PreparedDataset
from caption_debias.errors import UserError
from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare

ray = pytest.importorskip("ray")
# Ray Data warns about its own deprecated settings when its context is first built.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def write_table(path, n=23):
    """JSON lines with duplicates, empty captions, a bad line and a path escaping the root."""
    lines = []
    for i in range(n):
        row = {
            "image": f"img/{i}.jpg",
            "caption": f"The image shows item {i}. It is red.\nA dog sits on the left.",
            "key": f"id{i % 9}",
        }
        if i % 7 == 3:
            row["caption"] = "  "
        if i == 11:
            row["image"] = "../escape.jpg"
        lines.append(json.dumps(row))
    lines.insert(5, "{not json")
    path.write_text("\n".join(lines) + "\n")
    return path


def snapshot(folder):
    ds = PreparedDataset.open(folder)
    m = ds.manifest
    return {
        "rows": ds.read().to_pylist(),
        "rejects": list(ds.rejects()),
        "counts": m["counts"],
        "inputs": m["inputs"],
        "complete": m["complete"],
        "shards": [(s["path"], s["rows"], s["sha256"]) for s in m["shards"]],
    }


@pytest.mark.slow  # a Ray runtime: over 20 s on 2 shared cores
def test_ray_engine_matches_local_engine_and_resumes(tmp_path, ray_runtime):
    data = write_table(tmp_path / "t.jsonl")
    local = prepare([data], tmp_path / "local", PrepareOptions(format="table", shard_rows=4, quiet=True))
    on_ray = prepare(
        [data], tmp_path / "ray", PrepareOptions(format="table", shard_rows=4, quiet=True, engine="ray", workers=2)
    )
    a, b = snapshot(tmp_path / "local"), snapshot(tmp_path / "ray")
    assert len(a["shards"]) >= 4 and a["counts"]["rejected"] >= 4 and a["counts"]["duplicate_keys"] > 0
    assert a == b  # rows, keys, rejects, counts and shard bytes (sha256) identical
    assert on_ray["options"]["engine"] == "ray" and local["options"]["engine"] == "local"

    # Resume: lose one finished shard and its sidecar, break another shard; the Ray rerun
    # rebuilds exactly those and reuses the rest, as the local engine does.
    out = tmp_path / "ray"
    (out / "shards/part-00001.parquet").unlink()
    (out / ".prepare/part-00001.json").unlink()
    (out / "shards/part-00002.parquet").write_bytes(b"torn")
    kept = (out / "shards/part-00000.parquet").stat().st_mtime_ns
    prepare([data], out, PrepareOptions(format="table", shard_rows=4, quiet=True, engine="ray", workers=2))
    assert snapshot(out) == a
    assert (out / "shards/part-00000.parquet").stat().st_mtime_ns == kept  # reused, not rewritten

    # The engine is a runtime option: a local rerun resumes the Ray run's folder.
    prepare([data], out, PrepareOptions(format="table", shard_rows=4, quiet=True, engine="local"))
    assert snapshot(out) == a


def test_unknown_engine_is_a_user_error(tmp_path):
    data = write_table(tmp_path / "t.jsonl", n=3)
    with pytest.raises(UserError, match="unknown --engine 'spark'"):
        prepare([data], tmp_path / "o", PrepareOptions(format="table", engine="spark"))


@pytest.mark.slow  # a Ray runtime: over 20 s on 2 shared cores
def test_cli_engine_ray_starts_and_stops_its_own_runtime(tmp_path):
    """`prepare --engine ray` from the command line, in a fresh process with no RAY_ADDRESS."""
    import subprocess
    import sys

    data = write_table(tmp_path / "t.jsonl", n=6)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [
        sys.executable,
        "-m",
        "caption_debias.cli.main",
        "prepare",
        str(data),
        "-o",
        str(tmp_path / "cli"),
        "--format",
        "table",
        "--engine",
        "ray",
        "--workers",
        "1",
        "--shard-rows",
        "2",
        "-q",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    local = prepare([data], tmp_path / "local", PrepareOptions(format="table", shard_rows=2, quiet=True))
    assert snapshot(tmp_path / "cli") == snapshot(tmp_path / "local")
    assert local["counts"]["read"] == 7
    bad = subprocess.run([*cmd[:-3], "--engine", "spark"], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "unknown --engine 'spark'" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow  # a Ray runtime
def test_ray_tasks_come_back_in_order_bounded_with_errors_as_their_line(ray_runtime):
    from caption_debias.engines import Ready
    from caption_debias.engines.ray import MAX_WINDOW, ray_ordered_map

    # defined here: a function of this module would be pickled by name, and Ray's workers cannot import tests/
    def _slow_when_even(task: int) -> dict:
        import time

        time.sleep(0.05 * (task % 2 == 0))  # uneven tasks: they finish out of order
        if task == 33:
            raise UserError("out/part-00033.parquet: cannot write (No space left on device)")
        return {"task": task}  # a sidecar

    pulled = []

    def items(n):
        for i in range(n):
            pulled.append(i)
            yield Ready({"task": i}) if i % 5 == 0 else i

    got, window = [], max(1, min(2 * int(ray.cluster_resources()["CPU"]), MAX_WINDOW))
    for side in ray_ordered_map(_slow_when_even, items(33), max_in_flight=1):
        got.append(side["task"])
        assert len(pulled) - len(got) <= 4 * window  # the driver holds at most four windows of tasks
    assert got == list(range(33))
    with pytest.raises(UserError, match=r"^out/part-00033.parquet: cannot write \(No space left on device\)$"):
        list(ray_ordered_map(_slow_when_even, range(40), max_in_flight=1))


def test_missing_ray_is_a_user_error(monkeypatch):
    import builtins

    from caption_debias.engines.ray import _connect

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(UserError, match=r"caption-debias\[ray\]"):
        _connect(None, 1)


def test_unreachable_ray_address_fails_fast(monkeypatch):
    import socket

    from caption_debias.engines.ray import _check_reachable

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        _check_reachable(f"127.0.0.1:{port}")
    _check_reachable("auto")  # left to Ray


def test_score_actors_fit_the_nodes_they_run_on():
    """--workers actors each ask for what one node can give (a head and a raylet of one CPU each: one CPU
    per actor at --workers 1, which the cluster's total divided by the actors, 2, never fits)."""
    from caption_debias.engines.ray import actor_resources, cpus_per_actor

    assert cpus_per_actor([1, 1], 1) == 1 and cpus_per_actor([1, 1], 2) == 1
    assert cpus_per_actor([4, 2], 1) == 4 and cpus_per_actor([4, 2], 2) == 2 and cpus_per_actor([4, 2], 3) == 2
    assert cpus_per_actor([8], 3) == 2 and cpus_per_actor([16, 16], 4) == 8
    assert cpus_per_actor([1, 1], 3) == 0.5 and cpus_per_actor([2], 5) == 0.3333  # more actors than CPUs share them
    for nodes, workers in [([1, 1], 1), ([4, 2], 3), ([3, 3, 2], 4), ([1], 4)]:
        per = cpus_per_actor(nodes, workers)
        assert sum(int(n // per + 1e-9) for n in nodes) >= workers  # every actor has a place
    with pytest.raises(UserError, match="no CPU"):
        cpus_per_actor([0], 1)
    gpu_nodes = [{"CPU": 16.0, "GPU": 2.0}, {"CPU": 4.0, "GPU": 1.0}, {"CPU": 8.0}]
    assert actor_resources(3, True, gpu_nodes) == {"num_cpus": 4.0, "num_gpus": 1}
    with pytest.raises(UserError, match="one GPU per actor, and the Ray cluster has 3"):
        actor_resources(4, True, gpu_nodes)
    assert actor_resources(2, False, [{"CPU": 1.0}, {"CPU": 1.0}]) == {"num_cpus": 1.0, "num_gpus": 0}
