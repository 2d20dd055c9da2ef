"""Pool workers die with the command that started them, and never write for a dead one.

A worker of a `kill -9`ed command would otherwise finish its task, rename files into a folder
whose lock is gone (another command may hold it by then) and wait forever for more work.
`bind_to_parent` is the pool's worker initializer; `exit_if_orphaned` is called by the atomic
writer just before each rename, so an orphan never publishes a file.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

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
