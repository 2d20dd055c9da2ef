"""Every command keeps the flags and help its users see: the live CLI against tests/data/cli_surface.json."""

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


def test_the_same_commands(live, recorded):
    assert sorted(live) == sorted(recorded)


@pytest.mark.parametrize("name", sorted(json.loads(FIXTURE.read_text())))
def test_each_command_keeps_its_params_and_help(live, recorded, name):
    assert live[name]["params"] == recorded[name]["params"]
    assert live[name]["help"].splitlines() == recorded[name]["help"].splitlines()
