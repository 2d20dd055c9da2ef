"""constraints.txt pins every package pyproject.toml asks for, at a version its specifier allows, so `make install`
(`uv pip install -c constraints.txt -e ".[all,test]"`, CI's too) installs one known set on a fresh clone."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text("utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
            assert m, f"constraints.txt: not a NAME==VERSION pin: {line!r}"
            found[canonicalize_name(m.group(1))] = m.group(2)
    return found


def test_every_requirement_is_pinned_at_a_version_it_allows():
    import tomllib  # Python 3.11+, as tests/test_core_install.py

    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    wanted = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]
    pinned = pins()
    assert "caption-debias" not in pinned  # the project itself is installed editable, never pinned
    for text in wanted:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        if name == "caption-debias":
            continue  # [all] names the other extras
        assert name in pinned, f"{req.name} is in pyproject.toml but not pinned in constraints.txt"
        assert req.specifier.contains(pinned[name], prereleases=True), f"{name}=={pinned[name]} is outside {req}"


def test_make_install_uses_the_constraints():
    makefile = (ROOT / "Makefile").read_text("utf-8")
    assert '-c constraints.txt -e ".[all,test]"' in makefile
    assert re.search(r"^\$\(STAMP\): .*constraints\.txt", makefile, re.M)  # a new pin reinstalls
    assert "pip install -q -c constraints.txt uv" in makefile and "uv" in pins()  # the installer is pinned too
    # uv compiles no bytecode at install: make's commands keep what they compile, or under PYTHONDONTWRITEBYTECODE
    # every fresh interpreter compiles torch again
    assert "uv pip install" in makefile and re.search(r"^export PYTHONDONTWRITEBYTECODE =$", makefile, re.M)
