"""The CLI in a process of its own, forked from an interpreter that has already imported the heavy modules.

A fresh `python -m caption_debias.cli.main` spends most of a short run importing torch, open_clip and
pyarrow, and the tests start the CLI hundreds of times. `run_cli` still gives every call a process of its
own: its own exit status, stdout and stderr on file descriptors 1 and 2, environment and working folder,
and a normal interpreter exit (atexit, flushing, a traceback on an uncaught exception). Only the imports
are shared: each call is forked from one warm server per pytest worker (this file run as a script).
Tests of a fresh interpreter itself (what an import prints, the first line's latency, which packages a
command imports, a process's peak memory) keep a plain subprocess.

What a module reads at import (the environment: huggingface_hub's constants, score's MKL_CBWR) is read
once, in the server, from the environment it was started with. So a call whose environment differs from
the server's runs as a plain subprocess, and a forked child keeps the server's environment as its imports
left it; tests/test_fork_server_state.py compares a child's import-time state with a fresh process's.
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
PRELOAD = (
    "caption_debias.cli.main",
    "numpy",
    "pyarrow.parquet",
    "pyarrow.dataset",  # curate's reads
    "polars",
    "PIL.Image",
    "matplotlib.pyplot",  # stats' and eval's pictures
    "torch",
    "open_clip",
)
SCRIPT = str(Path(sys.executable).with_name("caption-debias"))  # the console script a user runs
BASE_ENV = dict(os.environ)  # the session's environment (conftest's settings, no test's monkeypatch): the server's
PER_TEST = ("PYTEST_CURRENT_TEST",)  # pytest sets it in os.environ during each test; no import reads it
# What libraries write into os.environ at import or start (None: any value): a test process that imported or
# started them holds these, a forked child's own imports write them again, and a user's shell has none of them,
# so they do not make a call fresh.
WRITTEN_BY_LIBRARIES = {
    "MKL_CBWR": "AUTO,STRICT",  # caption_debias.score
    "NO_ALBUMENTATIONS_UPDATE": "1",  # caption_debias.pack.images, before img2dataset's resizer
    "TOKENIZERS_PARALLELISM": "false",  # open_clip's tokenizer
    "_RJEM_MALLOC_CONF": None,  # polars
    "TORCHINDUCTOR_CACHE_DIR": None,  # torch._inductor
    "LD_LIBRARY_PATH": None,  # cv2 (albumentations, under img2dataset's resizer) adds its own folder
    "KMP_DUPLICATE_LIB_OK": "True",  # scikit-learn
    "KMP_INIT_AT_FORK": "FALSE",  # scikit-learn, joblib
    "RAY_CLIENT_MODE": "0",  # ray's import
    "RAY_USAGE_STATS_ENABLED": "0",  # ray.init, kept after ray.shutdown
    "RAY_AUTH_MODE": None,  # ray.init
    "PYTHONBREAKPOINT": "ray.util.rpdb._driver_set_trace",  # ray.init
}


def _read_at_import(env: dict) -> dict:
    """The environment as the server's imports would read it: the same for every test that sets nothing itself."""
    return {
        k: v
        for k, v in env.items()
        if k not in PER_TEST and not (k in WRITTEN_BY_LIBRARIES and WRITTEN_BY_LIBRARIES[k] in (None, v))
    }


def environment_changes(before: dict, after: dict) -> list[str]:
    """The variables a test set, changed or removed between two snapshots of os.environ, imports' writes left out."""
    kept, now = _read_at_import(before), _read_at_import(after)
    return sorted(k for k in kept.keys() | now.keys() if kept.get(k) != now.get(k))


def import_time_state() -> dict:
    """What the preloaded modules read or set at import: the environment, huggingface_hub's constants."""
    from huggingface_hub import constants

    plain = (str, bool, int, float, type(None))
    hub = {k: v for k, v in vars(constants).items() if k.isupper() and isinstance(v, plain)}
    return {"environ": _read_at_import(dict(os.environ)), "huggingface_hub": hub}


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def _serve() -> None:
    """Read one request a line; fork the command, answer its pid, and write its status to a file when it ends."""
    import select

    sys.path.pop(0)  # this folder: a command's imports see what the console script's do
    _preload()
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

    if "state" in request:  # a probe: what this child's imports read, for the comparison with a fresh process
        Path(request["state"]).write_text(json.dumps(import_time_state()), "utf-8")
        return 0
    streams = [(os.devnull, os.O_RDONLY), (request["stdout"], os.O_WRONLY), (request["stderr"], os.O_WRONLY)]
    for fd, (path, mode) in enumerate(streams):  # 0, 1, 2
        target = os.open(path, mode)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(request["cwd"])  # the environment is the server's, as its imports left it (run_cli's rule)
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
        self.env = BASE_ENV  # what its imports read: a call with another environment does not fork
        self.proc = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=self.env,
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
_starting = threading.Lock()  # calls from several threads at once share one server


def _warm_server() -> _Server:
    global _server
    with _starting:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
        return _server


def _server_for(env: dict) -> _Server | None:
    """The warm server, or None where a call in `env` must run fresh: its imports would read another environment."""
    server = _warm_server()
    return server if _read_at_import(env) == _read_at_import(server.env) else None


def run_cli(
    *args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`caption-debias ARGS` in a process of its own; the result as subprocess.run(capture_output, text) gives it."""
    env = dict(os.environ if env is None else env)  # subprocess.run's rule: the given environment, whole
    server = _server_for(env)
    if server is None:
        return subprocess.run([SCRIPT, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)
    with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
        files = {name: str(Path(tmp) / name) for name in ("stdout", "stderr", "status")}
        for name in ("stdout", "stderr"):
            Path(files[name]).touch()
        code = _forked(server, {"argv": list(args), "cwd": str(cwd or os.getcwd()), **files}, args, timeout)
        out, err = (Path(files[name]).read_text("utf-8") for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(["caption-debias", *args], code, out, err)


def child_state(env: dict | None = None) -> dict:
    """import_time_state() as the process run_cli(env=env) would run sees it (a forked child, or a fresh one)."""
    env = dict(os.environ if env is None else env)
    server = _server_for(env)
    if server is None:
        return fresh_state(env)
    with tempfile.TemporaryDirectory(prefix="cli-") as tmp:
        files = {"state": str(Path(tmp) / "state.json"), "status": str(Path(tmp) / "status")}
        assert _forked(server, files, ("<state>",), 60) == 0
        return json.loads(Path(files["state"]).read_text("utf-8"))


def fresh_state(env: dict | None = None) -> dict:
    """import_time_state() of a fresh interpreter that imports what the server preloads."""
    proc = subprocess.run(
        [sys.executable, __file__, "--state"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _forked(server: _Server, request: dict, args: tuple, timeout: float) -> int:
    """Start `request` in a child of the server and wait for its exit status."""
    pid = server.start(request)
    status, deadline = Path(request["status"]), time.monotonic() + timeout
    while not status.exists():
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"the CLI server ended (status {server.proc.returncode}) while caption-debias {args} ran"
            )
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            while not status.exists():  # reaped before its folder goes
                time.sleep(0.005)
            raise subprocess.TimeoutExpired(["caption-debias", *args], timeout)
        time.sleep(0.005)
    return int(status.read_text())


if __name__ == "__main__":
    if sys.argv[1:] == ["--state"]:
        sys.path.pop(0)  # as the server does
        _preload()
        print(json.dumps(import_time_state()))
    else:
        _serve()
