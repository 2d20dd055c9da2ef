"""The CLI in a process of its own, forked from an interpreter that has already imported the heavy modules.

A fresh `python -m caption_debias.cli.main` spends most of a short run importing torch, open_clip and
pyarrow, and the tests start the CLI hundreds of times. `run_cli` still gives every call a process of its
own: its own exit status, stdout and stderr on file descriptors 1 and 2, environment and working folder,
and a normal interpreter exit (atexit, flushing, a traceback on an uncaught exception). Only the imports
are shared: each call is forked from one warm server per pytest worker (this file run as a script).
Tests of a fresh interpreter itself (what an import prints, the first line's latency, which packages a
command imports, a process's peak memory) keep a plain subprocess.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRELOAD = ("caption_debias.cli.main", "numpy", "pyarrow.parquet", "polars", "PIL.Image", "torch", "open_clip")
SCRIPT = str(Path(sys.executable).with_name("caption-debias"))  # the console script a user runs


def _serve() -> None:
    """Read one request a line; fork the command, answer its pid, and write its status to a file when it ends."""
    import importlib
    import select

    sys.path.pop(0)  # this folder: a command's imports see what the console script's do
    for name in PRELOAD:
        importlib.import_module(name)
    os.write(1, b"ready\n")
    running: dict[int, str] = {}  # pid -> its status file
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.01 if running else None)
        for pid, path in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                del running[pid]
                try:
                    Path(path + ".tmp").write_text(str(os.waitstatus_to_exitcode(status)))
                    os.rename(path + ".tmp", path)
                except FileNotFoundError:  # its caller gave up on it (a timeout) and removed the folder
                    pass
        if not readable:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                os._exit(_command(request))
            running[pid] = request["status"]
            os.write(1, f"{pid}\n".encode())


def _command(request: dict) -> int:
    """Run the console script's main() and end as the interpreter does: atexit handlers, then flushed streams.

    The modules' own teardown is skipped (os._exit): it takes seconds with torch loaded and writes nothing.
    """
    import traceback

    from caption_debias.cli.main import main

    streams = [(os.devnull, os.O_RDONLY), (request["stdout"], os.O_WRONLY), (request["stderr"], os.O_WRONLY)]
    for fd, (path, mode) in enumerate(streams):  # 0, 1, 2
        target = os.open(path, mode)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [SCRIPT, *request["argv"]]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return code


def _exit_code(code: object) -> int:
    """SystemExit's argument as the interpreter turns it into a status (a message goes to stderr)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


class _Server:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n", "the CLI server did not start"
        atexit.register(self.close)

    def start(self, request: dict) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            return int(self.proc.stdout.readline())

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


_server: _Server | None = None


def run_cli(
    *args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`caption-debias ARGS` in a process of its own; the result as subprocess.run(capture_output, text) gives it."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = _Server()
    with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
        files = {name: str(Path(tmp) / name) for name in ("stdout", "stderr", "status")}
        for name in ("stdout", "stderr"):
            Path(files[name]).touch()
        env = dict(os.environ if env is None else env)  # subprocess.run's rule: the given environment, whole
        pid = _server.start({"argv": list(args), "cwd": str(cwd or os.getcwd()), "env": env, **files})
        status, deadline = Path(files["status"]), time.monotonic() + timeout
        while not status.exists():
            if _server.proc.poll() is not None:
                raise RuntimeError(
                    f"the CLI server ended (status {_server.proc.returncode}) while caption-debias {args} ran"
                )
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                while not status.exists():  # reaped before its folder goes
                    time.sleep(0.005)
                raise subprocess.TimeoutExpired(["caption-debias", *args], timeout)
            time.sleep(0.005)
        out, err = (Path(files[name]).read_text("utf-8") for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(["caption-debias", *args], int(status.read_text()), out, err)


if __name__ == "__main__":
    _serve()
