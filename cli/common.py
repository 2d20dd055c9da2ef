"""The one dialect every command speaks, built from the command's options class: every field is a flag
(its name, spellings, default, help, limits, type and metavar read from the field), plus --config, -h
and old flag spellings as hidden aliases. See docs/architecture.md, "Adding a command".

A command declares only what is not a field, and what it does with the options:

    def _pack(options: PackOptions, prepared: str, out: str) -> None:
        # its docstring is the command's -h text
        from caption_debias.pack.api import pack

        pack(prepared, out, options=options)

    pack = Command(PackOptions, _pack, args=(argument("prepared", str, "Prepared (or curated) folder ..."),),
                   out=out_param("Output folder: NNNNN.tar, ..."), renamed={"--to": "--out"})

and main.py registers it: `add_command(app, "pack", pack_cmd.pack)`.
"""

from __future__ import annotations

import enum
import inspect
import sys
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Optional

import typer
from typer.core import TyperCommand

from caption_debias.errors import UserError
from caption_debias.options import (
    API_ONLY,
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
# Where -h lists a field: these first (after the inputs), these last (the flags every stage shares),
# the command's own fields between, in the order its options class declares them.
FIRST = ("out", "image_root", "max_missing_images")
LAST = ("workers", "engine", "ray_address", "overwrite", "quiet", "log_interval")


class Param(NamedTuple):
    """A parameter that is not a field of the options class: a positional input, --out, a hidden spelling."""

    name: str
    annotation: Any
    info: Any  # typer.Argument(...) or typer.Option(...)


def argument(name: str, annotation: Any, help: str, default: Any = ..., **kwargs: Any) -> Param:
    """A positional input (a list of folders: `annotation=list[str]`)."""
    return Param(name, annotation, typer.Argument(default, help=help, **kwargs))


def out_param(help: str, default: Any = ..., annotation: Any = str) -> Param:
    """--out (-o): the one name of every output folder or file."""
    return Param("out", annotation, typer.Option(default, "--out", "-o", help=help))


def _same(raw: dict) -> dict:
    return raw


@dataclass(frozen=True)
class Command:
    """A command: its options class, what it does with the options, and its few parameters that are
    not fields. `run(options, **params)` gets the options object (built from the flags, --config and
    the defaults) and each of `args`, `out` and `hidden` by name; its docstring is the command's -h text.
    A name in `args` that is a field (train's DATA) is that field as a positional argument.
    `renamed`: old flag spellings, accepted and hidden; `translate`: older --config keys to today's."""

    options: type
    run: Callable[..., None]
    args: tuple[Param | str, ...] = ()
    out: Param | None = None
    hidden: tuple[Param, ...] = ()
    renamed: Mapping[str, str] = field(default_factory=dict)
    translate: Callable[[dict], dict] = _same

    def params(self) -> list[Param]:
        """Every parameter in -h's order: inputs, then the fields (FIRST, own, LAST), hidden ones, --config."""
        fields = fields_of(self.options)
        args = [field_param(self.options, a, argument=True) if isinstance(a, str) else a for a in self.args]
        taken = {p.name for p in args} | API_ONLY
        names = [n for n in _declared_order(self.options) if n not in taken]
        ordered = [n for n in FIRST if n in names] + [n for n in names if n not in FIRST + LAST]
        options = [field_param(self.options, n) for n in ordered + [n for n in LAST if n in names]]
        out = [] if self.out is None or "out" in fields else [self.out]
        return [*args, *out, *options, *self.hidden, Param("config", Optional[Path], config_option(self.translate))]

    def callback(self) -> Callable[..., None]:
        """The function typer reads: its signature is `params()`, its docstring the run's."""
        fields = fields_of(self.options)
        params = self.params()
        own = [p.name for p in params if p.name not in fields and p.name != "config"]

        def callback(ctx: typer.Context, **values: Any) -> None:
            self.run(options_from_params(self.options, ctx), **{name: values[name] for name in own})

        context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        callback.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [context]
            + [
                inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.info, annotation=p.annotation)
                for p in params
            ]
        )
        callback.__doc__ = self.run.__doc__
        callback.__annotations__ = {}  # typer reads the types from the signature
        return callback


def _declared_order(cls: type) -> list[str]:
    """The fields of an options class, the class's own first, then each base's, down the MRO."""
    names: list[str] = []
    for klass in cls.__mro__:
        names += [n for n in klass.__dict__.get("__annotations__", {}) if n in fields_of(cls) and n not in names]
    return names


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def field_param(cls: type, name: str, *, argument: bool = False) -> Param:
    """Field `name` of options class `cls` as a typer option (or a positional argument): its flags,
    default, help, limits, type and metavar.

    A number or a field with choices is parsed by the field itself (`check_value`), so a bad value
    on the command line or in --config is the same one line as from `validate()` (NaN included).
    A field without a default (`required()`) is a required option. Limits are shown after the help
    (`help_text`); the metavar is typer's (<int>, <str>) unless the field names one (FILE, SPEC)."""
    f = fields_of(cls)[name]
    annotation = _hints(cls)[name]
    default = ... if is_required(f) else field_default(f)
    if argument:
        return Param(name, annotation, typer.Argument(default, help=f.metadata["help"]))
    kind = field_kind(cls, name)
    parse = kind in (int, float, str) and (kind is not str or f.metadata.get("choices"))
    info = typer.Option(
        default,
        *flags_of(f),
        help=help_text(cls, name),
        metavar=f.metadata.get("metavar"),
        parser=(lambda value: check_value(cls, name, value)) if parse else None,
    )
    return Param(name, annotation, info)


def help_text(cls: type, name: str) -> str:
    """What -h says of a field: its help, then its bounds ('Range: x>=1.') when it has any (no
    brackets: rich would read '[x>=1]' as markup and drop it)."""
    limits = limits_text(cls, name)
    return fields_of(cls)[name].metadata["help"] + (f" Range: {limits}." if limits else "")


def options_from_params(cls: type, ctx: typer.Context) -> Any:
    """The options object of a command from what click parsed (`ctx.params`: flags typed, --config
    values, defaults). Parameters that are not fields (the positional inputs, --out, --config) are left out."""
    names = fields_of(cls)
    return cls(**{name: _plain(value) for name, value in ctx.params.items() if name in names})


def _plain(value: Any) -> Any:
    """A parsed value as the options classes hold it: paths as text, several values as a list."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


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


def config_option(translate: Callable[[dict], dict] = _same) -> Any:
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


def renamed_flags(renamed: Mapping[str, str]) -> type[TyperCommand]:
    """A command class that accepts old flag spellings (hidden) and says once that they changed."""

    class Renamed(TyperCommand):
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

    return Renamed


def add_command(app: typer.Typer, name: str, command: Command) -> None:
    """Register a command with -h and its old flag spellings."""
    app.command(name, cls=renamed_flags(command.renamed), context_settings=CONTEXT_SETTINGS)(command.callback())
