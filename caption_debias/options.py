"""What every command's options class shares: fields that carry their --help text, and --config files.

An options class (PrepareOptions, CurateOptions, PackOptions, ScoreOptions, StatsOptions,
TrainConfig, EvalOptions, ...) is the one source of each option's default and help: its fields are
declared with `option()` (`required()` for one the user must give), and the
command line (cli/common.py `from_field`) reads both from there, so the CLI, a --config file and
the Python API cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError

CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json")
# Help texts of the options every long command shares, worded once.
LOG_INTERVAL_HELP = "Without a terminal: one plain progress line every this many seconds."
QUIET_HELP = "No progress display and no summary."


def option(default: Any, help: str) -> Any:
    """A dataclass field with its --help text (a list default becomes a fresh list per instance)."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def required(help: str) -> Any:
    """A dataclass field with its --help text and no default: a flag the user must give (synth's --n)."""
    return dataclasses.field(metadata={"help": help})


def is_required(f: dataclasses.Field) -> bool:
    """Whether a field has no default (declared with `required()`)."""
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING  # type: ignore[misc]


def field_default(f: dataclasses.Field) -> Any:
    """A field's default value, whether given as a value or as a factory."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    raise ValueError(f"field {f.name} has no default")


def defaults(cls: type) -> dict[str, Any]:
    """{field name: default} of an options class."""
    return {f.name: field_default(f) for f in dataclasses.fields(cls)}


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The top-level table of a TOML, YAML or JSON file; a missing file or a parse error is one line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--config {path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise UserError(f"--config {path}: use a .toml, .yaml/.yml or .json file")
    text = path.read_text("utf-8")
    try:
        if suffix == ".toml":
            import tomllib

            raw = tomllib.loads(text)
        elif suffix == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text) or {}
    except Exception as exc:  # parser errors name line and column: one line is enough
        raise UserError(f"--config {path}: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise UserError(f"--config {path}: expected a table of options at the top level")
    return raw
