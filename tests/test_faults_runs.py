"""Hostile runs: a killed command leaves no writer, a shard is what its manifest says, odd captions cost one row.

Each test here reproduces a fault of issue 25 that the toolkit once had; docs/reliability.md
lists them with what the user sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from caption_debias.prepare.options import PrepareOptions
from caption_debias.prepare.run import prepare


def opts(**kw) -> PrepareOptions:
    return PrepareOptions(quiet=True, **kw)


def cli(*args: str, timeout: int = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "caption_debias.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


def element(i: int, caption: str | None = None, **fields) -> dict:
    text = caption if caption is not None else f"Photo {i} shows a harbour at dusk. Boats are moored.\n\nHills rise."
    return {
        "id": f"s{i}",
        "image": f"img/{i % 4}.jpg",
        "conversations": [
            {"from": "human", "value": "<image>\nWhat is this photo about?"},
            {"from": "gpt", "value": text},
        ],
        **fields,
    }


def sharegpt(path: Path, n: int) -> Path:
    path.write_text(json.dumps([element(i) for i in range(n)]))
    return path


def files(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


# -- dying processes: kill -9 of a command leaves no worker behind ---------------------------

# Loaded by every Python process of the run (spawned workers too): a worker's fsync before each
# rename sleeps, so the run is still busy when it is killed, whatever the machine's speed.
SLOW_WORKERS = """
import multiprocessing, os, time
_real_fsync = os.fsync
def _slow_fsync(fd):
    if multiprocessing.parent_process() is not None:
        time.sleep(float(os.environ["CD_SLOW_FSYNC"]))
    return _real_fsync(fd)
os.fsync = _slow_fsync
"""


@pytest.fixture(scope="module")
def kill_inputs(tmp_path_factory):
    """A ShareGPT4V file, a prepared folder of many small shards and its images."""
    from PIL import Image

    root = tmp_path_factory.mktemp("kill")
    src = sharegpt(root / "s.json", 80)
    (root / "images" / "img").mkdir(parents=True)
    for i in range(4):
        Image.new("RGB", (40 + i, 30), (60 * i, 90, 200)).save(root / "images" / "img" / f"{i}.jpg")
    prepare([src], root / "prepared", opts(shard_rows=2))
    inject = root / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SLOW_WORKERS)
    return root


KILLED_COMMANDS = {
    "prepare": lambda r, out: ["prepare", str(r / "s.json"), "--output", str(out), "--shard-rows", "2"],
    "curate": lambda r, out: ["curate", str(r / "prepared"), "--out", str(out)],
    "pack": lambda r, out: (
        ["pack", str(r / "prepared"), "--out", str(out), "--image-root", str(r / "images")]
        + ["--samples-per-shard", "2", "--image-size", "32"]
    ),
}


@pytest.mark.parametrize("command", sorted(KILLED_COMMANDS))
def test_kill_9_of_a_command_leaves_no_worker_and_the_folder_unchanged(kill_inputs, tmp_path, command):
    import psutil

    out = tmp_path / "out"
    args = [*KILLED_COMMANDS[command](kill_inputs, out), "--workers", "2", "-q"]
    path = os.pathsep.join(p for p in (str(kill_inputs / "inject"), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CD_SLOW_FSYNC": "0.3"}
    proc = subprocess.Popen([sys.executable, "-m", "caption_debias.cli.main", *args], env=env, stderr=subprocess.PIPE)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    finished = []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [c for c in parent.children() if "resource_tracker" not in " ".join(c.cmdline())]
        finished = [p for p in out.rglob("*.json") if p.name.startswith(("part-", "0"))]
        if len(workers) >= 2 and len(finished) >= 2:
            break
        time.sleep(0.05)
    assert len(finished) >= 2, "no worker finished a task in time"
    run = parent.children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    _, alive = psutil.wait_procs(run, timeout=5)
    for orphan in alive:  # do not leave them running past a failed test
        orphan.kill()
    assert not alive, f"{len(alive)} processes of the killed run still alive"
    before = files(out)
    time.sleep(1.0)  # longer than a slowed worker takes to publish its next file
    assert files(out) == before
