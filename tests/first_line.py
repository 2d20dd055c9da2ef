"""Time to a command's first line of output: every command on tiny inputs, in a subprocess
through pipes (as under SLURM or CI), stopped once its first byte arrives.

Shared by tests/test_first_line.py (a generous bound) and benchmarks/bench_first_line.py (the
figures in docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

CLI = str(Path(sys.executable).parent / "caption-debias")


def make_inputs(root: Path) -> None:
    """Tiny inputs under `root`: a 16-row prepared folder with its images (and its table), and a
    prepared folder of URL rows."""
    from train_fixtures import make_prepared

    from caption_debias.prepare.options import PrepareOptions
    from caption_debias.prepare.run import prepare

    make_prepared(root, n=16)
    urls = root / "urls.jsonl"
    rows = [
        {"key": f"u{i}", "image": f"https://example.org/{i}.jpg", "caption": f"A thing {i}. It is red."}
        for i in range(8)
    ]
    urls.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    prepare([urls], root / "url-prepared", PrepareOptions(format="table", quiet=True))
    plan = {
        "base": str(root / "prepared"),
        "image_root": str(root / "images"),
        "arms": {"baseline": {}},
        "train": {"model": "tiny", "steps": 1, "batch_size": 4},
        "eval": {"data": [str(root / "prepared")], "image_root": str(root / "images")},
    }
    (root / "plan.json").write_text(json.dumps(plan), "utf-8")


def command_lines(root: Path, out: Path) -> dict[str, list[str]]:
    """Every command's arguments on the inputs under `root`, writing under `out` (a fresh folder
    for each run: a run stopped at its first line leaves its output behind)."""
    p, i, o = str(root / "prepared"), str(root / "images"), out
    return {
        "prepare": ["prepare", str(root / "table.jsonl"), "--format", "table", "--out", str(o / "prepare")],
        "stats": ["stats", p, "--out", str(o / "stats")],
        "curate": ["curate", p, "--out", str(o / "curate"), "--image-root", i],
        "score": ["score", p, "--out", str(o / "score"), "--model", "tiny", "--image-root", i],
        "train": ["train", p, "--image-root", i, "--model", "tiny", "--out", str(o / "run"), "--max-steps", "2"],
        "export": ["export", "tiny", "--out", str(o / "export")],
        "eval": ["eval", "tiny", "--data", p, "--image-root", i, "--device", "cpu"],
        "probe": ["probe", "tiny", "--data", p, "--image-root", i, "--device", "cpu", "--out", str(o / "probe")],
        "synth": ["synth", "--out", str(o / "synth"), "--n", "8"],
        "demo": ["demo", "--quick", "--out", str(o / "demo")],
        "urls": ["urls", str(root / "url-prepared"), "--out", str(o / "urls.parquet")],
        "export-captions": ["export-captions", p, "--out", str(o / "captions.jsonl")],
        "pack": ["pack", p, "--out", str(o / "pack"), "--image-root", i],
        "view": ["view", p, "--image-root", i, "--port", "0"],
        "ablate": ["ablate", str(root / "plan.json"), "--out", str(o / "ablate")],
    }


def first_output(
    args: list[str],
    timeout: float = 120.0,
    cli: list[str] | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[float, str]:
    """(seconds from the start to the first byte on stdout or stderr, the first line); the
    command (and whatever it started) is stopped then. No output within `timeout`: (inf, "").

    `cli`: how to start the command line (default this environment's `caption-debias`); `env`:
    variables added to this process's; `cwd`: where it runs."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE")}, **(env or {})}
    env["OMP_NUM_THREADS"] = "1"
    started = time.monotonic()
    proc = subprocess.Popen(
        [*(cli or [CLI]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout, proc.stderr], [], [], timeout)
        seconds = time.monotonic() - started if ready else float("inf")
        text = os.read(ready[0].fileno(), 4096).decode("utf-8", "replace") if ready else ""
        # the line may arrive in pieces: wait a moment for its end
        while ready and "\n" not in text and time.monotonic() - started < seconds + 1.0:
            more, _, _ = select.select([ready[0]], [], [], 0.1)
            if more:
                chunk = os.read(ready[0].fileno(), 4096).decode("utf-8", "replace")
                if not chunk:
                    break
                text += chunk
        return seconds, text.splitlines()[0] if text else ""
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # its own session: the command and its workers only
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def startup_seconds(cli: list[str] | None = None, env: dict[str, str] | None = None) -> float:
    """Time to the first line of `caption-debias --version`: the interpreter and the CLI's own start."""
    return first_output(["--version"], cli=cli, env=env)[0]
