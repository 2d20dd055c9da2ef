"""The folder lock: one writer at a time, a clear refusal, no stale lock after a kill."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from caption_debias.locking import FolderLocked, folder_lock

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


def test_second_holder_is_refused_with_the_holders_pid(tmp_path, monkeypatch):
    """A refused process that looks between the holder's lock and its record (the last holder's record
    still there) looks again and names the holder."""
    import json

    from caption_debias import locking
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
        "sys.stdin.readline()\n"  # its record only once the refused process has seen the old one
        "record = {'pid': os.getpid(), 'host': socket.gethostname(), 'command': 'prepare', 'since': time.time()}\n"
        f"open({str(holder_path)!r}, 'w').write(json.dumps(record))\n"
        "print('written', flush=True)\n"
        "time.sleep(30)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    real_holder, looks = locking.holder, []

    def look(folder, beside=False):
        got = real_holder(folder, beside)
        looks.append(got)
        if len(looks) == 1:  # the old record seen: now the holder writes its own
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "written"
        return got

    monkeypatch.setattr(locking, "holder", look)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(FolderLocked) as err:
            with folder_lock(folder, "curate"):
                pass
    finally:
        proc.kill()
        proc.wait()
    assert looks[0]["command"] == "old" and len(looks) >= 2
    assert f"caption-debias prepare (pid {proc.pid})" in str(err.value)
