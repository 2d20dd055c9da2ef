"""s3:// folders against a local object-store stand-in: moto's S3 server on 127.0.0.1 only.

What memory:// cannot show: several processes writing one remote folder (--workers 2 spawns
them), the lock between two processes through S3's conditional put (If-None-Match), polars
reading s3:// itself (stats), and s3fs's own upload and read paths. Nothing leaves loopback.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

from image_worlds import moto_s3  # noqa: E402  (tests/ is on sys.path: conftest.py)

from caption_debias import storage  # noqa: E402
from caption_debias.dataset import PreparedDataset  # noqa: E402
from caption_debias.locking import FolderLocked, folder_lock  # noqa: E402
from caption_debias.prepare.options import PrepareOptions  # noqa: E402
from caption_debias.prepare.run import prepare  # noqa: E402


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on loopback (tests/image_worlds.py: moto_s3); the AWS variables point s3fs (botocore)
    and polars at it."""
    with moto_s3() as (_server, fs, bucket):
        yield fs, bucket


def _table(path, n: int = 60) -> None:
    rows = [
        {"key": f"k{i}", "image": f"img{i:04d}.png", "caption": f"This image shows item {i}. It is red. It is small."}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")


def test_prepare_with_worker_processes_and_stats_on_s3(s3, tmp_path):
    from caption_debias.stats.compute import compute_stats

    fs, bucket = s3
    _table(tmp_path / "t.jsonl")
    fs.put_file(str(tmp_path / "t.jsonl"), f"{bucket}/in/t.jsonl")
    out = f"s3://{bucket}/prepared"
    options = PrepareOptions(format="table", shard_rows=16, workers=2, quiet=True)
    manifest = prepare([f"s3://{bucket}/in/t.jsonl"], out, options)  # shards written by spawned workers
    local = prepare([tmp_path / "t.jsonl"], tmp_path / "prepared", PrepareOptions(format="table", shard_rows=16))
    assert manifest["counts"] == local["counts"] and len(manifest["shards"]) == 4
    assert PreparedDataset.open(out).read(["key", "sentence_tokens"]) == PreparedDataset.open(
        tmp_path / "prepared"
    ).read(["key", "sentence_tokens"])
    assert not fs.exists(f"{bucket}/prepared/.caption-debias.lock.json")
    stats = compute_stats([out])  # polars reads s3:// itself
    assert stats["records"] == 60 and stats["folders"] == [out]


HOLD = """
import sys, time
from caption_debias.locking import folder_lock
with folder_lock(sys.argv[1], "prepare"):
    print("held", flush=True)
    time.sleep(60)
"""


def test_lock_between_processes_and_after_a_kill(s3):
    fs, bucket = s3
    folder = f"s3://{bucket}/locked"
    child = subprocess.Popen([sys.executable, "-c", HOLD, folder], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(FolderLocked, match=rf"in use by caption-debias prepare \(pid {child.pid}\)"):
            with folder_lock(folder, "curate"):
                pytest.fail("a second process got the lock")
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert fs.exists(f"{bucket}/locked/.caption-debias.lock.json")  # a killed holder cannot delete it
        with folder_lock(folder, "curate"):  # its pid is gone on this host: taken at once
            held = json.loads(fs.cat_file(f"{bucket}/locked/.caption-debias.lock.json"))
            assert held["pid"] == os.getpid() and held["command"] == "curate"
    finally:
        child.kill()
        child.wait()


def test_exclusive_create_is_the_stores_not_a_check(s3):
    """Two writers that both passed the existence check: S3's conditional put lets one win."""
    from caption_debias import locking

    fs, bucket = s3
    record = storage.as_path(f"s3://{bucket}/race/.caption-debias.lock.json")
    fs.pipe_file(record.path, b'{"token": "first"}')  # written after our check would have passed
    real_exists = record.fs.exists
    try:
        record.fs.exists = lambda path: False  # as if the other writer's PUT landed just after our check
        assert locking._create(record, b'{"token": "second"}') is False
    finally:
        record.fs.exists = real_exists
    assert json.loads(fs.cat_file(record.path)) == {"token": "first"}


def test_prepare_from_and_to_s3_off_a_terminal_prints_plain_lines(s3, tmp_path):
    """`prepare s3://... --out s3://...` through pipes (SLURM, CI) without -q: records read, not a
    traceback (the bytes-read measure asks the OS for file positions: local files only)."""
    fs, bucket = s3
    _table(tmp_path / "t.jsonl")
    fs.put_file(str(tmp_path / "t.jsonl"), f"{bucket}/piped/t.jsonl")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE")}
    cli = os.path.join(os.path.dirname(sys.executable), "caption-debias")
    args = [f"s3://{bucket}/piped/t.jsonl", "--format", "table", "--out", f"s3://{bucket}/piped/out"]
    proc = subprocess.run(
        [cli, "prepare", *args, "--shard-rows", "16", "--log-interval", "0.0001"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("caption-debias prepare:")]
    assert lines and "\x1b[" not in proc.stderr, proc.stderr
    assert lines[-1].startswith("caption-debias prepare: 60 records, ") and lines[-1].endswith(
        "60 records read, 60 done, 0 rejects, 4 shards"
    ), lines
    assert proc.stderr.startswith("caption-debias: reading 1 input: t.jsonl\n"), proc.stderr
    assert PreparedDataset.open(f"s3://{bucket}/piped/out").rows == 60
