"""The pre-commit hook is the ruff gate of `make lint`, at the ruff version pyproject.toml pins, and fetches no hook
repository (a local hook: pre-commit installs ruff with pip)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_the_hook_runs_ruff_check_and_format_at_the_pinned_version():
    import tomllib  # Python 3.11+, as tests/test_core_install.py

    test_extra = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]["test"]
    (pinned,) = [r for r in test_extra if re.match(r"ruff\b", r)]
    assert pinned.startswith("ruff==")
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text("utf-8"))
    assert [repo["repo"] for repo in config["repos"]] == ["local"]  # nothing cloned from the network
    hooks = config["repos"][0]["hooks"]
    assert [h["entry"].split()[:2] for h in hooks] == [["ruff", "check"], ["ruff", "format"]]
    for hook in hooks:
        assert hook["language"] == "python" and hook["additional_dependencies"] == [pinned], hook["id"]
    makefile = (ROOT / "Makefile").read_text("utf-8")
    assert "ruff check ." in makefile and "ruff format --check ." in makefile  # the same gate as make lint
