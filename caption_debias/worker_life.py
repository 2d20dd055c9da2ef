"""Pool workers die with the command that started them, and never write for a dead one.

A worker of a `kill -9`ed command would otherwise finish its task, rename files into a folder
whose lock is gone (another command may hold it by then) and wait forever for more work.
`bind_to_parent` is the pool's worker initializer; `exit_if_orphaned` is called by the atomic
writer just before each rename, so an orphan never publishes a file.

Processes that a library starts for us and binds only loosely (Ray's local runtime: its agents
retry the dead GCS for about a minute after a `kill -9` of the command) are covered by
`reap_descendants_on_death`: a guard process that kills them as soon as the command is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

WATCH_INTERVAL_S = 0.5

_parent_pid: int | None = None  # set in pool workers only


def bind_to_parent(parent_pid: int) -> None:
    """Worker initializer: die when `parent_pid` dies.

    On Linux the kernel sends SIGKILL at the parent's death (prctl PR_SET_PDEATHSIG); a thread
    watching the parent pid does the same everywhere else, since PR_SET_PDEATHSIG is Linux-only
    and fires when the parent's spawning thread ends rather than its process. (So a pool must
    start its workers from a thread that outlives it: ordered_map's caller does.)
    """
    global _parent_pid
    _parent_pid = parent_pid
    if sys.platform.startswith("linux"):
        _set_parent_death_signal()
    if orphaned():  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch, name="caption-debias-parent-watch", daemon=True).start()


def _set_parent_death_signal() -> None:
    import ctypes
    import ctypes.util

    pr_set_pdeathsig = 1  # <linux/prctl.h>
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # no usable libc: the watchdog thread still ends the worker


def orphaned() -> bool:
    """True in a pool worker whose parent command has died (it was re-parented)."""
    return _parent_pid is not None and os.getppid() != _parent_pid


def exit_if_orphaned(tmp: Path | None = None) -> None:
    """End this worker at once, removing `tmp`, when its parent is gone (its folder lock with it)."""
    if orphaned():
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        os._exit(1)


def _watch() -> None:
    while True:
        time.sleep(WATCH_INTERVAL_S)
        if orphaned():
            os._exit(1)


GUARD_ENV = "CAPTION_DEBIAS_RUN"  # inherited by every process the command starts, however deep


@contextmanager
def reap_descendants_on_death() -> Iterator[None]:
    """While the block runs, a guard process (`python -m caption_debias.worker_life PID TOKEN`)
    kills every process this one started as soon as this one is gone; the block's end stops the
    guard (a normal end cleans up after itself).

    The guard knows them two ways: the descendants it saw (every WATCH_INTERVAL_S), and a token
    in GUARD_ENV that every process started inside the block inherits: one started between two
    looks, and already re-parented to init when the guard looks again, still carries it.
    """
    token = f"{os.getpid()}-{time.time_ns()}"
    before = os.environ.get(GUARD_ENV)
    os.environ[GUARD_ENV] = token
    guard_process = subprocess.Popen(
        [sys.executable, "-m", "caption_debias.worker_life", str(os.getpid()), token],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a terminal's Ctrl-C reaches the command, which then ends the guard
    )
    try:
        yield
    finally:
        guard_process.terminate()
        try:
            guard_process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            guard_process.kill()
        if before is None:
            os.environ.pop(GUARD_ENV, None)
        else:
            os.environ[GUARD_ENV] = before


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _carrying(token: str, me: int) -> list:
    """Every process whose environment holds GUARD_ENV=token (but this one)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != me and proc.environ().get(GUARD_ENV) == token:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def guard(pid: int, token: str) -> None:
    """The guard's loop: once `pid` has died, kill its descendants seen so far and every process
    carrying `token` (psutil's Process remembers each one's start time, so a reused pid is never
    killed)."""
    import psutil

    try:
        command = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    me = os.getpid()
    seen: dict[int, psutil.Process] = {}
    while _alive(command):
        try:
            seen.update((p.pid, p) for p in command.children(recursive=True) if p.pid != me)
        except psutil.Error:
            pass
        time.sleep(WATCH_INTERVAL_S)
    for _ in range(3):  # a dying parent may still start a child: look again until none is left
        targets = [p for p in [*seen.values(), *_carrying(token, me)] if _alive(p)]
        if not targets:
            return
        for proc in targets:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(targets, timeout=WATCH_INTERVAL_S)


if __name__ == "__main__":
    guard(int(sys.argv[1]), sys.argv[2])
