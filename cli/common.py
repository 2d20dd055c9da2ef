"""The one dialect every command speaks: options read from the options class, --config, -h, -q,
--log-interval, and old flag spellings kept as hidden aliases. See docs/architecture.md, "Adding a command".

    def pack(
        ctx: typer.Context,
        prepared: str = typer.Argument(...),
        out: str = out_option("Output folder: NNNNN.tar, ..."),
        image_size: int = from_field(PackOptions, "image_size"),  # flag, default, help, limits: the field's
        workers: int = from_field(PackOptions, "workers"),  # --workers -j, from EngineOptions
        quiet: bool = from_field(PackOptions, "quiet"),
        log_interval: float = from_field(PackOptions, "log_interval"),
        config: Optional[Path] = config_option(),
    ) -> None:
        run_pack(prepared, out, options=options_from_params(PackOptions, ctx))

and in main.py `add_command(app, "pack", pack_cmd.pack, renamed={"--to": "--out"})`.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from typer.core import TyperCommand

from caption_debias.errors import UserError
from caption_debias.options import (
    check_value,
    field_default,
    field_kind,
    fields_of,
    flags_of,
    is_required,
    limits_text,
    load_config_file,
)

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def from_field(cls: type, name: str, *flags: str, **kwargs: Any) -> Any:
    """typer.Option for field `name` of options class `cls`: its flags, default, help and limits.

    A number or a field with choices is parsed by the field itself (`check_value`), so a bad value
    on the command line or in --config is the same one line as from `validate()` (NaN included).
    A field without a default (`required()`) is a required option. `flags` overrides the field's
    spellings; limits are the field's only, shown after the help (`help_text`). The metavar stays
    typer's (<int>, <str>): ranges and choices in that column squeeze the flags' column at 80
    characters; `choices_metavar=True` shows a short list of choices there instead."""
    if {"min", "max", "clamp"} & set(kwargs):
        raise ValueError(f"{cls.__name__}.{name}: declare its limits on the field (option(..., min=, max=))")
    f = fields_of(cls)[name]
    default = ... if is_required(f) else field_default(f)
    kind = field_kind(cls, name)
    if kwargs.pop("choices_metavar", False):
        kwargs.setdefault("metavar", f"[{'|'.join(f.metadata['choices'])}]")
    if kind in (int, float, str) and (kind is not str or f.metadata.get("choices")):
        kwargs.setdefault("parser", lambda value: check_value(cls, name, value))
    return typer.Option(default, *(flags or flags_of(f)), help=help_text(cls, name), **kwargs)


def help_text(cls: type, name: str) -> str:
    """What -h says of a field: its help, then its bounds ('Range: x>=1.') when it has any (no
    brackets: rich would read '[x>=1]' as markup and drop it)."""
    limits = limits_text(cls, name)
    return fields_of(cls)[name].metadata["help"] + (f" Range: {limits}." if limits else "")


def options_from_params(cls: type, ctx: typer.Context, **given: Any) -> Any:
    """The options object of a command from what click parsed (`ctx.params`: flags typed, --config
    values, defaults), so no command lists its fields twice. Parameters that are not fields (the
    positional inputs, --out, --config) are left out; `given` adds or overrides fields."""
    names = fields_of(cls)
    values = {name: _plain(value) for name, value in ctx.params.items() if name in names}
    return cls(**{**values, **given})


def _plain(value: Any) -> Any:
    """A parsed value as the options classes hold it: paths as text, several values as a list."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def out_option(help: str, default: Any = ..., *, short: bool = True) -> Any:
    """--out (-o): the one name of every output folder or file."""
    return typer.Option(default, "--out", *(("-o",) if short else ()), help=help)


def _config_names(command: Any) -> dict[str, str]:
    """key in a --config file -> parameter name: the parameter's name and each of its long flags."""
    names = {}
    for param in command.params:
        if param.name in ("config", "help") or getattr(param, "hidden", False):
            continue
        names[param.name] = param.name
        for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if opt.startswith("--"):
                names[opt[2:].replace("-", "_")] = param.name
    return names


def _load_config(ctx: typer.Context, value: Path, translate: Callable[[dict], dict]) -> None:
    """Load --config FILE into click's default_map: its values replace the defaults, flags typed win."""
    import difflib

    raw = translate(load_config_file(value))
    names = _config_names(ctx.command)
    params = {p.name: p for p in ctx.command.params}
    loaded: dict[str, Any] = {}
    for key, item in raw.items():
        name = names.get(str(key).replace("-", "_"))
        if name is None:
            near = difflib.get_close_matches(str(key).replace("-", "_"), list(names), n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"see `caption-debias {ctx.info_name} -h`"
            raise UserError(f"--config {value}: unknown option {key!r} for `{ctx.info_name}` ({hint})")
        param = params[name]
        if (getattr(param, "multiple", False) or param.nargs == -1) and not isinstance(item, list):
            item = [item]  # a repeatable flag, or an argument taking several, given one value
        loaded[name] = item
    ctx.default_map = {**(ctx.default_map or {}), **loaded}


def config_option(translate: Callable[[dict], dict] = lambda raw: raw) -> Any:
    """--config FILE (TOML, YAML or JSON; keys are the flag names, dashes or underscores).

    `translate`: a command's older keys to today's (train: `tensorboard = false`)."""

    def read(ctx: typer.Context, value: Optional[Path]) -> Optional[Path]:
        if value is not None and not ctx.resilient_parsing:
            _load_config(ctx, value, translate)
        return value

    return typer.Option(
        None,
        "--config",
        is_eager=True,  # read before the other options, so the file's values fill in their defaults
        callback=read,
        help="TOML or YAML file of options (keys: the flag names, - or _); flags given on the command line win.",
    )


def renamed_flags(renamed: dict[str, str]) -> type[TyperCommand]:
    """A command class that accepts old flag spellings (hidden) and says once that they changed."""

    class Command(TyperCommand):
        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            new = []
            for i, arg in enumerate(args):
                if arg == "--":
                    new.extend(args[i:])
                    break
                flag, eq, rest = arg.partition("=")
                if flag in renamed:
                    print(
                        f"caption-debias {ctx.info_name}: {flag} is now {renamed[flag]} (the old spelling still works)",
                        file=sys.stderr,
                    )
                    arg = renamed[flag] + eq + rest
                new.append(arg)
            return super().parse_args(ctx, new)

    return Command


def add_command(app: typer.Typer, name: str, fn: Callable, renamed: Optional[dict[str, str]] = None) -> None:
    """Register a command with -h and its old flag spellings."""
    app.command(name, cls=renamed_flags(renamed or {}), context_settings=CONTEXT_SETTINGS)(fn)
