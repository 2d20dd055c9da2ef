"""The Python API's shared pieces: the result every call returns, option checking, callable stage packages.

`import caption_debias as cd` gives `cd.prepare`, `cd.curate`, `cd.score`, `cd.pack`, `cd.stats`,
`cd.train` and `cd.evaluate` (docs/api.md). Each stage's `api` module is its one front door: the
command line (cli/) calls the same function with the options object it parsed. Each is its stage's package made callable (a
package attribute would otherwise be replaced by the subpackage the moment anything imports
it); calling it imports the stage's `api` module then, so `import caption_debias` stays light
(no torch, polars or pyarrow until a stage runs). The options are the CLI flags in Python
spelling (`--image-root` -> `image_root`); an unknown one is a TypeError naming the close
matches; or one options object as `options=`. Calls print nothing unless `quiet=False`: not even
what open_clip logs below ERROR (its "No pretrained weights loaded" for a random init).
"""

from __future__ import annotations

import difflib
import importlib
import logging
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

STAGES = {
    "prepare": "caption_debias.prepare",
    "curate": "caption_debias.curate",
    "score": "caption_debias.score",
    "pack": "caption_debias.pack",
    "stats": "caption_debias.stats",
    "train": "caption_debias.train",
    "evaluate": "caption_debias.evaluate",
    "ablate": "caption_debias.ablate",
}


@dataclass(frozen=True)
class Result:
    """What a call did: the folder (or file) it wrote, its counts, the paths of its outputs, and
    `data`, the whole record (a manifest; the stats; a run's config and last metrics; eval results)."""

    command: str
    out: Path | None
    counts: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items() if not isinstance(v, dict))
        return f"Result({self.command} -> {self.out}: {counts})"


def options_from(cls: type, given: dict[str, Any], command: str, options: Any = None, **fixed: Any) -> Any:
    """The call's options object: `options` itself (then nothing else may be given), or
    `cls(**given, **fixed)` with `quiet` True unless given; an unknown option is a TypeError naming
    its close matches. The object is checked (`validate()`, one UserError line) before any stage runs."""
    if options is not None:
        if given or fixed:
            raise TypeError(f"{command}(): give the options as one {cls.__name__} or as keyword arguments, not both")
        if not isinstance(options, cls):
            raise TypeError(f"{command}(): options= takes a {cls.__name__}, not {type(options).__name__}")
        return options
    names = [f.name for f in fields(cls) if f.name not in fixed]
    aliases = _aliases(cls)
    given = {aliases.get(k, k): v for k, v in given.items()}
    unknown = [k for k in given if k not in names]
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, names, n=2)
            hints.append(f"{k!r}" + (f" (did you mean {' or '.join(close)}?)" if close else ""))
        raise TypeError(f"{command}(): unknown option {', '.join(hints)}; options: {', '.join(names)}")
    return cls(**{"quiet": True, **given, **fixed})


def _aliases(cls: type) -> dict[str, str]:
    """A field's other flag spellings in Python form -> the field (stats' --top: `top` -> top_phrases)."""
    from caption_debias.options import flags_of

    aliases = {}
    for f in fields(cls):
        for flag in flags_of(f):
            name = flag.split("/")[0].lstrip("-").replace("-", "_")
            if flag.startswith("--") and name != f.name:
                aliases[name] = f.name
    return aliases


class _BelowError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


@contextmanager
def quiet_logs(quiet: bool) -> Iterator[None]:
    """With `quiet`, records below ERROR logged on the root logger are dropped while the call runs:
    open_clip warns through `logging.warning` ("No pretrained weights loaded ..."), which would
    otherwise print on stderr (Python's last-resort handler, or the one logging.warning installs)."""
    if not quiet:
        yield
        return
    drop = _BelowError()
    root = logging.getLogger()
    root.addFilter(drop)
    try:
        yield
    finally:
        root.removeFilter(drop)


def as_list(value: str | Path | Iterable[str | Path]) -> list[str]:
    """One path or several, as a list of strings."""
    if isinstance(value, (str, Path)):
        return [str(value)]
    return [str(v) for v in value]


def stage_result(command: str, out: Any, manifest: dict[str, Any], paths: dict[str, Any]) -> Result:
    """The Result of a folder-writing stage (prepare, curate, pack) from its manifest."""
    from caption_debias import storage

    out = storage.as_path(out)
    listed = manifest.get("shards") or manifest.get("tars") or []
    outputs = {"manifest": out / "manifest.json", **{k: out / v for k, v in paths.items()}}
    outputs["shards" if "shards" in manifest else "tars"] = [out / s["path"] for s in listed]
    return Result(command, out, dict(manifest.get("counts") or {}), outputs, manifest)


class _CallableStage(types.ModuleType):
    """A stage package whose call runs the stage (its `api` module, imported at the first call)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        name = self.__name__.rsplit(".", 1)[1]
        run = getattr(importlib.import_module(f"{self.__name__}.api"), name)
        return run(*args, **kwargs)


def make_callable(package: str) -> None:
    """Make the package `package` (a stage) callable as its stage: `cd.prepare(...)`."""
    sys.modules[package].__class__ = _CallableStage
