"""Time to every command's first line of output, against the same at another git revision.

Each command runs on tiny inputs (tests/first_line.py: a 16-row prepared folder, the shipped
`tiny` model) in a subprocess through pipes, as under SLURM or CI, and is stopped at its first
byte on stdout or stderr. The baseline is the same command line at `--against` (default main,
run from a `git archive` of it with PYTHONPATH), and `caption-debias --version` (the interpreter
and the CLI's own start). Median of `--repeat` runs, the two revisions alternating.

    .venv/bin/python benchmarks/bench_first_line.py
    .venv/bin/python benchmarks/bench_first_line.py --against main --repeat 3 score train
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _common import ROOT, code_at

sys.path.insert(0, str(ROOT / "tests"))
from first_line import command_lines, first_output, make_inputs, startup_seconds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="*", help="commands to time (default: every one)")
    parser.add_argument("--against", default="main", help="git revision of the baseline (default: main)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_inputs(tmp / "inputs")
        names = args.commands or list(command_lines(tmp / "inputs", tmp))
        base_cli = [sys.executable, "-c", "from caption_debias.cli.main import main; main()"]
        base_env = {"PYTHONPATH": str(code_at(args.against, tmp / "baseline"))}
        startup = statistics.median(startup_seconds() for _ in range(args.repeat))
        print(f"caption-debias --version: {startup:.2f} s (the interpreter and the CLI's own start)")
        print(f"{'command':<16} {'this':>7} {args.against:>7} {'ratio':>6}  first line (this checkout)")
        for name in names:
            ours, theirs, line = [], [], ""
            for run in range(args.repeat):
                seconds, line = first_output(command_lines(tmp / "inputs", tmp / f"this-{run}")[name])
                ours.append(seconds)
                base = command_lines(tmp / "inputs", tmp / f"base-{run}")[name]
                # from the temporary folder: `python -c` puts the working directory first on sys.path
                theirs.append(first_output(base, cli=base_cli, env=base_env, cwd=tmp)[0])
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{name:<16} {a:>6.2f}s {b:>6.2f}s {b / a:>5.1f}x  {line[:90]}", flush=True)


if __name__ == "__main__":
    main()
