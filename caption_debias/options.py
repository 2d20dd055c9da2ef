"""What every command's options class shares: fields that carry their flag, help, choices and bounds;
the bases of the flags every command shares; and --config files.

An options class (PrepareOptions, CurateOptions, PackOptions, ScoreOptions, StatsOptions,
TrainConfig, EvalOptions, ...) is the one source of each option: its fields are declared with
`option()` (`required()` for one the user must give), which holds the default, the --help text,
the flag spelling, the metavar and the limits (choices, min/max, finite). The command line is
built from the class (cli/common.py `Command`): every flag is read from its field, and `validate()` checks a value against the same
field, so the CLI, a --config file and the Python API refuse the same values in the same words.
A float field is finite unless it says `finite=False`: NaN and infinities are refused everywhere.

The flags most commands share are declared once, in the bases below (`QuietOptions`,
`ProgressOptions`, `OverwriteOptions`, `ImageRootOptions`, `EngineOptions`, `StageOptions`);
an options class inherits the ones its command has.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from caption_debias.errors import UserError
from caption_debias.progress import DEFAULT_INTERVAL

CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json")
# A config file is a few lines: bound what one may hold, and what its YAML aliases may expand to.
MAX_CONFIG_BYTES = 1 << 20
MAX_CONFIG_VALUES = 1 << 20  # characters of every option's values together, each alias counted where used

ENGINES = ("local", "ray")
DEVICE_PATTERN = r"auto|cpu|mps|cuda(:\d+)?"  # a torch device name, or auto

# Help texts of the options every command shares, worded once.
QUIET_HELP = "No progress display and no summary."
LOG_INTERVAL_HELP = "Without a terminal: one plain progress line every this many seconds."
OVERWRITE_HELP = "Delete what --out holds from an earlier run and start over (default: a stage resumes its run; other commands refuse)."
IMAGE_ROOT_HELP = (
    "Folder the image paths are relative to (default: the input's own: a dump's folder, or the root a "
    "prepared folder's manifest records)."
)
MAX_MISSING_HELP = (
    "Stop (non-zero, before the manifest is written) when more than this share of the rows' images "
    "cannot be found under the image root (0 to 1)."
)
WORKERS_HELP = "Worker processes (the output is identical for any value)."
ENGINE_HELP = "Where the work runs: local (a process pool) or ray (Ray Data; the same output). See docs/scale.md."
# Fields the Python API takes that are no flag: how much work is queued, which changes no output.
API_ONLY = frozenset({"max_in_flight", "image_threads"})
RAY_ADDRESS_HELP = (
    "Ray cluster to join with --engine ray (default: $RAY_ADDRESS, else a local Ray runtime with --workers CPUs)."
)


def option(
    default: Any,
    help: str,
    *,
    flags: tuple[str, ...] = (),
    choices: tuple[str, ...] | None = None,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    finite: bool = True,
    runtime: bool = False,
    metavar: str | None = None,
) -> Any:
    """A dataclass field: its default and --help text, and what the CLI and `validate()` both read from it.

    flags: the command-line spellings (default `--name-with-dashes`); choices: the values allowed;
    min / max: bounds (exclusive with min_open / max_open); finite: a float field refuses NaN and
    infinities unless False; runtime: the value changes how fast a stage runs, not what it writes
    (a resumed run may change it); metavar: what -h shows for the value (FILE, SPEC; default the type,
    <int>). A list default becomes a fresh list per instance."""
    metadata = {
        "help": help,
        "flags": tuple(flags),
        "choices": None if choices is None else tuple(choices),
        "min": min,
        "max": max,
        "min_open": min_open,
        "max_open": max_open,
        "finite": finite,
        "runtime": runtime,
        "metavar": metavar,
    }
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def required(help: str, **limits: Any) -> Any:
    """A field with no default (a flag the user must give, synth's --n); `limits` as for `option()`."""
    field = option(None, help, **limits)
    return dataclasses.field(metadata=field.metadata)


def is_required(f: dataclasses.Field) -> bool:
    """Whether a field has no default (declared with `required()`)."""
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def field_default(f: dataclasses.Field) -> Any:
    """A field's default value, whether given as a value or as a factory."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise ValueError(f"field {f.name} has no default")


def defaults(cls: type) -> dict[str, Any]:
    """{field name: default} of an options class."""
    return {f.name: field_default(f) for f in dataclasses.fields(cls)}


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    """{name: field} of an options class."""
    return {f.name: f for f in dataclasses.fields(cls)}


def flags_of(f: dataclasses.Field) -> tuple[str, ...]:
    """A field's command-line spellings: its declared flags, else --name-with-dashes."""
    return f.metadata.get("flags") or (f"--{f.name.replace('_', '-')}",)


def flag_name(f: dataclasses.Field) -> str:
    """The spelling error messages name a field by: its first long flag (`--trim-padding` of a --x/--no-x pair)."""
    return next(flag for flag in flags_of(f) if flag.startswith("--")).split("/")[0]


@lru_cache(maxsize=None)
def _kinds(cls: type) -> dict[str, type | None]:
    """{field name: int, float, str or bool} of an options class's scalar fields (None: a list or another type)."""
    hints = typing.get_type_hints(cls)
    kinds: dict[str, type | None] = {}
    for name, hint in hints.items():
        args = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_args(hint) else [hint]
        kinds[name] = args[0] if len(args) == 1 and args[0] in (int, float, str, bool) else None
    return kinds


@lru_cache(maxsize=None)
def _nullable(cls: type) -> frozenset[str]:
    """The fields of an options class whose type admits None (`float | None`, `Any`)."""
    hints = typing.get_type_hints(cls)
    return frozenset(
        name for name, hint in hints.items() if hint is Any or type(None) in typing.get_args(hint) or hint is type(None)
    )


def field_kind(cls: type, name: str) -> type | None:
    """int, float, str or bool for a scalar field (Optional or not); None for a list or another type."""
    return _kinds(cls).get(name)


def _number(value: Any, kind: type, flag: str) -> int | float:
    """`value` (typed, or text from the command line or a config file) as an int or a float, or one line."""
    if isinstance(value, bool):  # YAML's `yes` is not a number
        raise UserError(f"{flag} must be a number (got {value!r})")
    try:
        if kind is float:
            return float(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return int(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        what = "a number" if kind is float else "a whole number"
        raise UserError(f"{flag} must be {what} (got {value!r})") from None


def _bounds_text(f: dataclasses.Field, kind: type) -> str:
    """The range of a bounded field as the error says it: 'at least 1', 'in (0, 1]', 'in 0..63'."""
    meta = f.metadata
    lo, hi = meta["min"], meta["max"]
    show = (lambda v: f"{v:g}") if kind is float else str
    if lo is not None and hi is not None:
        if kind is int and not meta["min_open"] and not meta["max_open"]:
            return f"in {lo}..{hi}"
        return f"in {'(' if meta['min_open'] else '['}{show(lo)}, {show(hi)}{')' if meta['max_open'] else ']'}"
    if lo is not None:
        return f"{'more than' if meta['min_open'] else 'at least'} {show(lo)}"
    return f"{'less than' if meta['max_open'] else 'at most'} {show(hi)}"


def _out_of_bounds(f: dataclasses.Field, value: float) -> bool:
    meta = f.metadata
    lo, hi = meta["min"], meta["max"]
    if lo is not None and (value <= lo if meta["min_open"] else value < lo):
        return True
    return hi is not None and (value >= hi if meta["max_open"] else value > hi)


def check_value(cls: type, name: str, value: Any) -> Any:
    """`value` for field `name` of `cls`, converted (a number from text) and checked against the
    field's limits; a bad one is a UserError naming the flag. None passes where the field's type
    admits it (an unset optional), and is refused where it does not (the API's `max_missing_images=None`)."""
    f = fields_of(cls)[name]
    kind = field_kind(cls, name)
    flag = flag_name(f)
    if value is None:
        if name in _nullable(cls):
            return None
        named: dict[type | None, str] = {float: "a number", int: "a whole number", bool: "true or false"}
        what = named.get(kind, "given a value")
        raise UserError(f"{flag} must be {what} (got None)")
    if kind in (int, float):
        value = _number(value, kind, flag)
        if kind is float and f.metadata.get("finite", True) and not math.isfinite(value):
            raise UserError(f"{flag} must be a finite number (got {value})")
        if (f.metadata.get("min") is not None or f.metadata.get("max") is not None) and _out_of_bounds(f, value):
            raise UserError(f"{flag} must be {_bounds_text(f, kind)} (got {value})")
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        raise UserError(f"unknown {flag} {value!r} (choose from {', '.join(choices)})")
    return value


def check_fields(options: Any) -> None:
    """Every field of an options object against its own limits (the first bad one: a UserError);
    a number given as text ("1e-6", as YAML may read it) is stored as the number it names."""
    cls = type(options)
    for name in fields_of(cls):
        setattr(options, name, check_value(cls, name, getattr(options, name)))


def limits_text(cls: type, name: str) -> str | None:
    """A field's bounds as -h shows them after its help ('x>=1', '0<x<=1'), None when it has none."""
    f = fields_of(cls)[name]
    lo, hi = f.metadata.get("min"), f.metadata.get("max")
    if lo is None and hi is None:
        return None
    show = (lambda v: f"{v:g}") if field_kind(cls, name) is float else str
    below = "<" if f.metadata["min_open"] else "<="
    above = "<" if f.metadata["max_open"] else "<="
    if lo is not None and hi is not None:
        return f"{show(lo)}{below}x{above}{show(hi)}"
    if lo is not None:
        return f"x{'>' if f.metadata['min_open'] else '>='}{show(lo)}"
    return f"x{above}{show(hi)}"


def check_device_name(device: str) -> None:
    """--device spelled as torch names a device, or auto (whether that device is there is asked of torch later)."""
    if not isinstance(device, str) or not re.fullmatch(DEVICE_PATTERN, device):
        raise UserError(f"--device {device!r}: use auto, cpu, cuda, cuda:N or mps")


# ---- the bases: the flags most commands share, declared once -----------------------------------------


@dataclass(kw_only=True)
class Options:
    """The root of every options class: `validate()` checks each field against its limits, then the
    class's own rules across fields (`check()`); `to_dict()` is what manifests and run folders record."""

    def validate(self) -> Any:
        check_fields(self)
        self.check()
        return self

    def check(self) -> None:
        """Rules across fields, and cheap facts about the inputs (a subclass's); a UserError when broken."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def output_shaping(self) -> dict[str, Any]:
        """The options a resumed run must share with the run it continues: every field not marked runtime."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if not f.metadata.get("runtime")}


@dataclass(kw_only=True)
class QuietOptions(Options):
    """--quiet (-q)."""

    quiet: bool = option(False, QUIET_HELP, flags=("--quiet", "-q"), runtime=True)


@dataclass(kw_only=True)
class ProgressOptions(QuietOptions):
    """--quiet and --log-interval: a command that can run long enough to show progress."""

    log_interval: float = option(DEFAULT_INTERVAL, LOG_INTERVAL_HELP, min=0, min_open=True, runtime=True)


@dataclass(kw_only=True)
class OverwriteOptions(Options):
    """--overwrite: a command that writes --out."""

    overwrite: bool = option(False, OVERWRITE_HELP, runtime=True)


@dataclass(kw_only=True)
class ImageRootOptions(Options):
    """--image-root: a string, so an fsspec URL reaches the library as typed (a Path would make s3:// s3:/)."""

    image_root: str | None = option(None, IMAGE_ROOT_HELP)

    def check_image_root(self, *, urls: bool = False) -> None:
        """A given root is a folder here; a URL is one line unless the command reads URL roots (`urls`)."""
        from caption_debias import storage

        root = self.image_root
        if root is None:
            return
        if storage.is_url(root):
            if not urls:
                storage.require_local(root, "--image-root")
            return
        if not Path(root).is_dir():
            raise UserError(f"--image-root {root}: no such folder")


@dataclass(kw_only=True)
class MissingImagesOptions(Options):
    """--max-missing-images: a stage that opens the rows' images (curate, score, pack)."""

    max_missing_images: float = option(0.5, MAX_MISSING_HELP, min=0, max=1, runtime=True)


@dataclass(kw_only=True)
class EngineOptions(Options):
    """--workers (-j), --engine and --ray-address: a stage that maps its tasks over workers."""

    workers: int = option(1, WORKERS_HELP, flags=("--workers", "-j"), min=1, runtime=True)
    engine: str = option("local", ENGINE_HELP, choices=ENGINES, runtime=True)
    ray_address: str | None = option(None, RAY_ADDRESS_HELP, runtime=True)


@dataclass(kw_only=True)
class StageOptions(ImageRootOptions, EngineOptions, OverwriteOptions, ProgressOptions):
    """What every folder-writing stage shares (prepare, curate, score, pack)."""


# ---- --config files ----------------------------------------------------------------------------------


def _parse_config(path: Path, suffix: str, text: str) -> Any:
    try:
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text) or {}
    except Exception as exc:  # parser errors name line and column: one line is enough
        raise UserError(f"--config {path}: {str(exc).splitlines()[0]}") from None


def _check_config_values(path: Path, raw: dict[str, Any]) -> None:
    """Each option's value is a value or a list of values, and all of them together stay small.

    YAML aliases share one object however often they are used, so a few lines can stand for
    gigabytes once something walks them: the size is counted as if every alias were expanded,
    and the walk stops as soon as it passes the bound."""
    left = MAX_CONFIG_VALUES
    for key, value in raw.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (list, dict)):
                raise UserError(
                    f"--config {path}: option {key!r} holds a nested list or table (give a value or a list of values)"
                )
            left -= len(str(item)) + 1
            if left < 0:
                raise UserError(
                    f"--config {path}: its values expand to more than {MAX_CONFIG_VALUES} characters "
                    f"(at option {key!r}; YAML aliases count each time they are used)"
                )


def _check_nested_size(path: Path, raw: Any) -> None:
    """A plan's tables and lists together stay small, aliases counted where used (as `_check_config_values`)."""
    left = MAX_CONFIG_VALUES
    stack = [raw]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            left -= len(str(item)) + 1
            if left < 0:
                raise UserError(
                    f"--config {path}: its values expand to more than {MAX_CONFIG_VALUES} characters "
                    "(YAML aliases count each time they are used)"
                )


def load_config_file(path: str | Path, nested: bool = False) -> dict[str, Any]:
    """The top-level table of a TOML, YAML or JSON file; a missing, oversized, non-UTF-8 or unparsable
    file, and a value no option can take, is one line. `nested`: tables inside are allowed (an
    ablation plan), still bounded in size."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--config {path}: no such file")
    suffix = path.suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise UserError(f"--config {path}: use a .toml, .yaml/.yml or .json file")
    with path.open("rb") as fh:
        data = fh.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"--config {path}: larger than {MAX_CONFIG_BYTES} bytes (a config file is a few options)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"--config {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    raw = _parse_config(path, suffix, text)
    if not isinstance(raw, dict):
        raise UserError(f"--config {path}: expected a table of options at the top level")
    if nested:
        _check_nested_size(path, raw)
    else:
        _check_config_values(path, raw)
    return raw
