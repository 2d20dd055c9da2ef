"""The folder lock: one writer at a time, a clear refusal, no stale lock after a kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from caption_debias.locking import HOLDER_FILE, FolderLocked, folder_lock

HOLD = """
import sys, time
from caption_debias.locking import folder_lock
with folder_lock(sys.argv[1], "prepare"):
    print("held", flush=True)
    time.sleep(60)
"""


def _hold_in_child(folder):
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_second_holder_is_refused_with_the_holders_pid(tmp_path):
    child = _hold_in_child(tmp_path / "out")
    try:
        with pytest.raises(FolderLocked) as err:
            with folder_lock(tmp_path / "out", "curate"):
                pytest.fail("a second writer got the lock")
        message = str(err.value)
        assert str(tmp_path / "out") in message and f"pid {child.pid}" in message and "prepare" in message
    finally:
        child.kill()
        child.wait()


def test_lock_of_a_killed_process_does_not_block(tmp_path):
    child = _hold_in_child(tmp_path / "out")
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    started = time.monotonic()
    with folder_lock(tmp_path / "out", "prepare"):
        assert (tmp_path / "out" / HOLDER_FILE).read_text().count(str(os.getpid())) == 1
    assert time.monotonic() - started < 5


def test_lock_is_released_on_error(tmp_path):
    with pytest.raises(RuntimeError):
        with folder_lock(tmp_path, "prepare"):
            raise RuntimeError("boom")
    with folder_lock(tmp_path, "prepare"):
        pass


def test_a_refused_lock_names_its_holder_even_before_the_holder_wrote_its_record(tmp_path):
    """The holder writes its record just after taking the lock; a command refused in between (with
    no record yet, or the last holder's record of a dead pid) waits for the record, never names
    the wrong process or 'holder unknown'."""
    import json

    from caption_debias.locking import lock_files

    folder = tmp_path / "f"
    folder.mkdir()
    lock_path, holder_path = lock_files(folder)
    holder_path.write_text(json.dumps({"pid": 2**22 + 7, "host": os.uname().nodename, "command": "old"}), "utf-8")
    script = (
        "import json, os, socket, sys, time\n"
        "from filelock import FileLock\n"
        f"lock = FileLock({str(lock_path)!r}, timeout=0)\n"
        "lock.acquire()\n"
        "print('locked', flush=True)\n"
        "time.sleep(0.4)\n"
        "record = {'pid': os.getpid(), 'host': socket.gethostname(), 'command': 'prepare', 'since': time.time()}\n"
        f"open({str(holder_path)!r}, 'w').write(json.dumps(record))\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(FolderLocked) as err:
            with folder_lock(folder, "curate"):
                pass
    finally:
        proc.kill()
        proc.wait()
    assert f"caption-debias prepare (pid {proc.pid})" in str(err.value)
