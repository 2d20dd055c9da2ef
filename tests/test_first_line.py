"""Never wait in silence: every command's first line of output (stdout or stderr, through pipes)
comes within 2 s of its start, before any heavy import (torch alone takes longer than that here).

Each command runs in a subprocess on tiny inputs and is stopped at its first line. The bound is
generous against the machine's load: 2 s, or six times what `caption-debias --version` takes
around that moment (the interpreter's and the CLI's own start, measured before and after) when
that is longer; importing torch alone takes seven times as long. Figures:
docs/benchmarks.md, "First line" (benchmarks/bench_first_line.py).
"""

from __future__ import annotations

import pytest
from first_line import command_lines, first_output, make_inputs, startup_seconds

GOAL_S = 2.0
COMMANDS = (
    "prepare",
    "stats",
    "curate",
    "score",
    "train",
    "export",
    "eval",
    "probe",
    "synth",
    "demo",
    "urls",
    "export-captions",
    "pack",
    "view",
    "ablate",
)


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    root = tmp_path_factory.mktemp("first-line")
    make_inputs(root)
    return command_lines(root, root / "out")


def test_every_command_is_covered(commands):
    from caption_debias.cli.main import app

    registered = {c.name for c in app.registered_commands}
    assert set(COMMANDS) == set(commands) == registered


@pytest.mark.parametrize("name", COMMANDS)
def test_first_line_within_two_seconds(commands, name):
    before = startup_seconds()
    seconds, line = first_output(commands[name])
    bound = max(GOAL_S, 6 * max(before, startup_seconds()))
    assert seconds <= bound, f"{name}: first line after {seconds:.1f} s (bound {bound:.1f} s): {line!r}"
    # a line saying what it does, not a library's warning or a traceback
    assert line and not line.startswith(("WARNING", "Traceback", "caption-debias: error")), (name, line)
