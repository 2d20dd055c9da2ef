"""How long commands stay silent: time to the first line and the longest wait between two lines.

Each command runs to its end on a synthetic world (`caption-debias synth`, prepared), through
pipes as under SLURM or CI, at the default --log-interval (30 s); every line of stdout and
stderr is stamped as it arrives. The baseline is the same command line at `--against` (default
main, from a `git archive` of it, run outside the checkout).

    .venv/bin/python benchmarks/bench_progress_silence.py --rows 400
"""

from __future__ import annotations

import argparse
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, code_at

CLI = str(Path(sys.executable).parent / "caption-debias")
DEMO_START = ROOT / "caption_debias" / "assets" / "demo-start"


def stamped(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, list[tuple[float, str]]]:
    """(wall seconds, [(seconds since the start, line)]) of one run to its end."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    sel = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        sel.register(stream, selectors.EVENT_READ)
    lines, open_streams = [], 2
    while open_streams:
        for key, _ in sel.select():
            line = key.fileobj.readline()
            if not line:
                sel.unregister(key.fileobj)
                open_streams -= 1
                continue
            lines.append((time.monotonic() - started, line.decode("utf-8", "replace").rstrip()))
    if proc.wait():
        raise SystemExit(f"{' '.join(cmd)} failed:\n" + "\n".join(text for _, text in lines[-20:]))
    return time.monotonic() - started, lines


def silences(wall: float, lines: list[tuple[float, str]]) -> tuple[float, float, str]:
    """(first line at, longest wait between lines (or the last line and the end), the line after it)."""
    times = [0.0, *(t for t, _ in lines), wall]
    texts = [*(text for _, text in lines), "(the end)"]
    gap, after = max((times[i + 1] - times[i], texts[i]) for i in range(len(texts)))
    return (lines[0][0] if lines else wall), gap, after


def commands(world: Path, out: Path) -> dict[str, list[str]]:
    prepared, images = str(world / "prepared"), str(world / "world")
    return {
        "score": ["score", prepared, "--model", f"local-dir:{DEMO_START}", "--out", str(out / "scored")],
        "train": ["train", prepared, "--model", f"local-dir:{DEMO_START}", "--out", str(out / "run")]
        + ["--max-steps", "20", "--batch-size", "32", "--precision", "fp32", "--report-to", ""],
        "export": ["export", str(world / "run"), "--out", str(out / "export")],
        "stats": ["stats", prepared, "--out", str(out / "report"), "--image-root", images],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="commands (default: score train export stats)")
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--against", default="main")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_TERMINAL", "TTY_COMPATIBLE")}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        world = tmp / "w"
        run = lambda *a: subprocess.run([CLI, *a, "-q"], check=True, env=env)  # noqa: E731
        run("synth", "--out", str(world / "world"), "--n", str(args.rows))
        run(
            "prepare",
            str(world / "world" / "sharegpt4v.json"),
            "--out",
            str(world / "prepared"),
            "--image-root",
            str(world / "world"),
        )
        run("train", str(world / "prepared"), "--model", "tiny", "--out", str(world / "run"), "--max-steps", "1")
        base_env = {**env, "PYTHONPATH": str(code_at(args.against, tmp / "baseline"))}
        base_cli = [sys.executable, "-c", "from caption_debias.cli.main import main; main()"]
        print(f"{args.rows} rows; first line / longest silence / wall, this checkout against {args.against}")
        for name in args.names or ["score", "train", "export", "stats"]:
            ours = stamped([CLI, *commands(world, tmp / "this")[name]], env, tmp)
            theirs = stamped([*base_cli, *commands(world, tmp / "base")[name]], base_env, tmp)
            (a1, a2, after), (b1, b2, _) = silences(*ours), silences(*theirs)
            print(
                f"{name:<7} this {a1:5.1f} s / {a2:5.1f} s / {ours[0]:5.1f} s   {args.against} {b1:5.1f} s / "
                f"{b2:5.1f} s / {theirs[0]:5.1f} s   (this: longest wait before {after[:70]!r})",
                flush=True,
            )


if __name__ == "__main__":
    main()
