"""What a user sees of the CLI: every command's parameters and its `-h` text at 100 columns, no colour.

`tests/test_cli_surface.py` compares the live CLI to tests/data/cli_surface.json. Rewrite that file
(`.venv/bin/python tests/cli_surface.py`) only when a flag or its help is meant to change, and say so.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "data" / "cli_surface.json"
WIDTH = 100
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _value(value: Any) -> Any:
    """A default as JSON holds it: plain values as they are, anything else by its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    return repr(value)


def _type_name(annotation: Any) -> str:
    """A parameter's type as `int`, `str?` (optional) or `list[str]`, however the annotation is spelled."""
    import typing

    if annotation is None:
        return "-"
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (list, typing.List):
        return f"list[{_type_name(args[0])}]"
    if args and len(args) < len(typing.get_args(annotation)):  # Optional[X], X | None
        return _type_name(args[0]) + "?"
    return getattr(annotation, "__name__", repr(annotation))


def _param(p: Any) -> dict[str, Any]:
    return {
        "name": p.name,
        "kind": p.param_type_name,
        "flags": list(p.opts),
        "secondary": list(getattr(p, "secondary_opts", [])),
        "default": None if callable(p.default) else _value(p.default),
        "required": p.required,
        "multiple": bool(getattr(p, "multiple", False)),
        "nargs": p.nargs,
        "type": _type_name(p.type_descriptor.annotation),
        "parsed_by_field": getattr(p.type_descriptor.parameter_info, "parser", None) is not None,
        "is_flag": bool(getattr(p, "is_flag", False)),
        "hidden": bool(getattr(p, "hidden", False)),
        "help": getattr(p, "help", None),
        "metavar": p.metavar,
    }


def _help(args: list[str]) -> str:
    """`caption-debias ARGS -h` as a user's terminal of WIDTH columns shows it, without colour."""
    import typer.rich_utils
    from typer.testing import CliRunner

    from caption_debias.cli.main import app

    saved = (typer.rich_utils.MAX_WIDTH, typer.rich_utils.FORCE_TERMINAL)
    typer.rich_utils.MAX_WIDTH, typer.rich_utils.FORCE_TERMINAL = WIDTH, False  # read from the environment at import
    try:
        result = CliRunner(env={"COLUMNS": str(WIDTH), "NO_COLOR": "1"}).invoke(app, [*args, "-h"])
    finally:
        typer.rich_utils.MAX_WIDTH, typer.rich_utils.FORCE_TERMINAL = saved
    assert result.exit_code == 0, result.output
    return _ANSI.sub("", result.output)


def surface() -> dict[str, Any]:
    """{command: {params: [...], help: text}}, and the top level under ""."""
    import typer

    from caption_debias.cli.main import app

    group = typer.main.get_command(app)
    out: dict[str, Any] = {"": {"params": [_param(p) for p in group.params], "help": _help([])}}
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        out[name] = {"params": [_param(p) for p in command.params], "help": _help([name])}
    return out


if __name__ == "__main__":
    FIXTURE.parent.mkdir(exist_ok=True)
    FIXTURE.write_text(json.dumps(surface(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {FIXTURE}")
