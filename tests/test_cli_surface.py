"""Every command keeps the flags and help its users see: the live CLI against tests/data/cli_surface.json.

Each parameter (flags, default, type, metavar, help, ...) and each option's rows in `-h` must be as
recorded; the order of the options in -h is the one rule of cli/common.py (`Command.params`), checked
on its own, so a command's options listed in another order still compare equal here.
"""

from __future__ import annotations

import json

import pytest
from cli_surface import FIXTURE, surface


@pytest.fixture(scope="module")
def live():
    return surface()


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FIXTURE.read_text())


def _rows(help_text: str) -> tuple[list[str], list[str]]:
    """-h as its lines outside the option rows, in order, and its rows (each row's lines together), sorted."""
    frame: list[str] = []
    rows: list[str] = []
    in_row = False
    for line in help_text.splitlines():
        inner = line[1:] if line.startswith("│") else ""
        text = inner.strip(" │")
        indent = len(inner) - len(inner.lstrip())
        if text[:1] in ("*", "-") and indent < 8:  # a row's first line: its flags (or a required mark)
            rows.append(line)
            in_row = True
        elif in_row and text and indent >= 8:  # its help wrapped, its [default: ...]
            rows[-1] += "\n" + line
        else:
            frame.append(line)
            in_row = False
    return frame, sorted(rows)


def test_the_same_commands(live, recorded):
    assert sorted(live) == sorted(recorded)


@pytest.mark.parametrize("name", sorted(json.loads(FIXTURE.read_text())))
def test_each_command_keeps_its_params_and_help(live, recorded, name):
    by_name = {p["name"]: p for p in live[name]["params"]}
    assert by_name == {p["name"]: p for p in recorded[name]["params"]}
    assert _rows(live[name]["help"]) == _rows(recorded[name]["help"])


def test_the_comparison_sees_a_changed_row(recorded):
    text = recorded["curate"]["help"]
    assert _rows(text.replace("[default: 0.5]", "[default: 0.6]", 1)) != _rows(text)
    assert _rows(text.replace("under the image root", "under the image rot", 1)) != _rows(text)
