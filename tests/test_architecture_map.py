"""docs/architecture.md is the map: every module of caption_debias/ has its place in the Layout table, and every
module a row names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "caption_debias"
MAP = ROOT / "docs" / "architecture.md"


def layout_rows(text: str) -> list[tuple[str, str]]:
    """(first cell, the rest) of each row of the Layout table."""
    table = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    return [tuple(line[2:].split(" | ", 1)) for line in table.splitlines() if line.startswith("| ") and " | " in line]


def package_row(rows: list[tuple[str, str]], top: str) -> str:
    """The text of the row of subpackage `top`: its cell names `caption_debias/top/` or its label the word `top`."""
    return " ".join(
        rest
        for cell, rest in rows
        if f"caption_debias/{top}/" in cell or re.search(rf"\*\*[^*]*\b{top}\b[^*]*\*\*", cell)
    )


def undocumented(text: str, package: Path = PACKAGE) -> list[str]:
    """Modules with no place on the map: a root module without its `caption_debias/NAME.py` row, a module of a
    subpackage named neither in that package's row (`name.py`, `` `name` ``, `` `name.attr` ``) nor by its path."""
    rows = layout_rows(text)
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.name == "__init__.py" or "assets" in rel.parts:
            continue
        if len(rel.parts) == 1:
            if f"`caption_debias/{rel.as_posix()}`" not in text:
                missing.append(rel.as_posix())
            continue
        row, stem = package_row(rows, rel.parts[0]), path.stem
        named = re.search(rf"(?<![\w/.]){re.escape(path.name)}|`{re.escape(stem)}[`.]", row)
        if not named and rel.as_posix() not in text:
            missing.append(rel.as_posix())
    return missing


def phantoms(text: str, package: Path = PACKAGE, root: Path = ROOT) -> list[str]:
    """Modules the Layout table names that do not exist: paths from the repository or the package, and `name.py`
    in a row that is in none of the row's folders (its `caption_debias/X/` or `X/` path, the words of its label)."""
    gone = []
    for cell, rest in layout_rows(text):
        folders = [package / top for top in re.findall(r"caption_debias/(\w+)/", cell)]
        folders += [root / top for top in re.findall(r"`(\w+)/`", cell)]
        folders += [package / word for word in re.findall(r"\w+", "".join(re.findall(r"\*\*[^*]+\*\*", cell)))]
        folders = [f for f in folders if f.is_dir()]
        for name in sorted(set(re.findall(r"(?<![\w.*])([\w/]+\.py)\b", cell + " " + rest))):
            if (root / name).is_file() or (package / name).is_file():
                continue
            if not any(next(folder.rglob(name), None) for folder in folders):
                gone.append(name)
    return gone


def test_every_module_has_a_place_on_the_map():
    assert undocumented(MAP.read_text("utf-8")) == []


def test_every_module_the_map_names_exists():
    assert phantoms(MAP.read_text("utf-8")) == []


def test_the_map_checks_find_a_missing_and_a_phantom_module(tmp_path):
    package = tmp_path / "caption_debias"
    (package / "stage").mkdir(parents=True)
    for rel in ("runner.py", "lonely.py", "stage/run.py", "stage/forgotten.py"):
        (package / rel).write_text("")
    text = (
        "## Layout\n\n| path | one job |\n|---|---|\n"
        "| `caption_debias/runner.py` | the runner |\n"
        "| **stage** `caption_debias/stage/` | `run.py` (the run), `ghost.py` (gone) |\n\n## Next\n"
    )
    assert undocumented(text, package) == ["lonely.py", "stage/forgotten.py"]
    assert phantoms(text, package, tmp_path) == ["ghost.py"]
