"""Time from a model command's start to its first line of real work, against the import floor.

Each model command (score, train, eval, probe, export) runs on tiny inputs (tests/first_line.py:
a 16-row prepared folder and its images) with the shipped trained model `demo-start`, in a
subprocess through pipes, as under SLURM or CI, and is stopped at its first line of real work:
score's first images encoded (the reference sample's first batch), train's first step, eval's
and probe's first encodings, export's "writing ..." line (the weights read and merged). The
floor is `python -c "import torch, open_clip"` in the same run; the target is 1.5x of it. Median
of `--repeat` runs, the floor and the commands alternating. The machine may be shared: the
load average (`uptime`) is printed before and after.

    .venv/bin/python benchmarks/bench_startup.py
    .venv/bin/python benchmarks/bench_startup.py --repeat 5 score eval
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT

sys.path.insert(0, str(ROOT / "tests"))
from first_line import CLI, make_inputs  # noqa: E402

MODEL = "demo-start"
# the first line of real work, per command (plain lines off a terminal, a line per unit of work)
WORK = {
    "score": re.compile(r"caption-debias score( reference)?: [1-9]"),
    "train": re.compile(r"caption-debias train: [1-9]"),
    "eval": re.compile(r"caption-debias eval: [^/]*?\b[1-9][\d,]* / "),
    "probe": re.compile(r"caption-debias probe: [^/]*?\b[1-9][\d,]* / "),
    "export": re.compile(r"caption-debias: writing "),
}


def command_lines(root: Path, out: Path) -> dict[str, list[str]]:
    p, i = str(root / "prepared"), str(root / "images")
    tick = ["--log-interval", "0.001"]  # every unit of work prints: the first one is seen when it happens
    return {
        "score": ["score", p, "--out", str(out / "score"), "--model", MODEL, "--image-root", i, *tick],
        "train": [
            "train",
            p,
            "--image-root",
            i,
            "--model",
            MODEL,
            "--out",
            str(out / "run"),
            "--max-steps",
            "2",
            "--batch-size",
            "4",
            *tick,
        ],
        "eval": ["eval", MODEL, "--data", p, "--image-root", i, "--device", "cpu", *tick],
        "probe": [
            "probe",
            MODEL,
            "--data",
            p,
            "--image-root",
            i,
            "--device",
            "cpu",
            "--out",
            str(out / "probe"),
            *tick,
        ],
        "export": ["export", MODEL, "--out", str(out / "export")],
    }


def time_to(argv: list[str], pattern: re.Pattern | None, timeout: float = 600.0) -> tuple[float, str]:
    """(seconds from the start to the first stderr line `pattern` matches, that line); with no
    pattern, to the process's exit. The process group is stopped then."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE", "COLUMNS")}
    env["OMP_NUM_THREADS"] = "1"
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, start_new_session=True)
    assert proc.stderr is not None
    try:
        if pattern is None:
            proc.wait(timeout=timeout)
            return time.monotonic() - started, ""
        buffer = b""
        while time.monotonic() - started < timeout:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if not ready:
                continue
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                raise RuntimeError(f"{argv[1]} ended before its first line of work:\n{buffer.decode()[-2000:]}")
            buffer += chunk
            *lines, rest = buffer.split(b"\n")
            for line in lines:
                text = line.decode("utf-8", "replace")
                if pattern.match(text):
                    return time.monotonic() - started, text
            buffer = b"\n".join(lines) + b"\n" + rest if lines else rest
        raise RuntimeError(f"{argv[1]}: no line of work within {timeout} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        proc.stderr.close()


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="*", help=f"commands to time (default: {', '.join(WORK)})")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    names = args.commands or list(WORK)
    floor_argv = [sys.executable, "-c", "import torch, open_clip"]
    print(f"load before: {uptime()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_inputs(root / "inputs")
        floors: list[float] = []
        times: dict[str, list[float]] = {n: [] for n in names}
        lines: dict[str, str] = {}
        for run in range(args.repeat):
            floors.append(time_to(floor_argv, None)[0])
            for name in names:
                argv = [CLI, *command_lines(root / "inputs", root / f"out-{run}")[name]]
                seconds, lines[name] = time_to(argv, WORK[name])
                times[name].append(seconds)
        floor = statistics.median(floors)
        print(
            f'floor `python -c "import torch, open_clip"`: {floor:.2f} s (runs: {", ".join(f"{t:.1f}" for t in floors)})'
        )
        print(f"{'command':<8} {'to work':>8} {'x floor':>8}  runs; first line of work")
        for name in names:
            median = statistics.median(times[name])
            runs = ", ".join(f"{t:.1f}" for t in times[name])
            print(f"{name:<8} {median:>7.2f}s {median / floor:>7.2f}x  {runs}; {lines[name][:80]}", flush=True)
    print(f"load after: {uptime()}")


if __name__ == "__main__":
    main()
