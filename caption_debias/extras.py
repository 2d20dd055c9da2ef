"""Optional dependencies: which `pip install 'caption-debias[EXTRA]'` brings a missing package.

The core (prepare, stats, text, export of captions) needs none of them; training,
evaluation, the demo, spaCy splitting and the Ray engine do.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from caption_debias.errors import UserError

# top-level module -> (distribution to name, extra that installs it)
OPTIONAL = {
    "torch": ("torch", "train"),
    "torchvision": ("torchvision", "train"),
    "open_clip": ("open_clip_torch", "train"),
    "safetensors": ("safetensors", "train"),
    "tensorboard": ("tensorboard", "train"),
    "webdataset": ("webdataset", "train"),
    "wids": ("webdataset", "train"),  # webdataset's random-access reader (pack, train on a packed folder)
    "img2dataset": ("img2dataset", "train"),
    "spacy": ("spacy", "spacy"),
    "ray": ("ray[data]", "ray"),
    "starlette": ("starlette", "view"),
    "uvicorn": ("uvicorn", "view"),
}


def install_hint(module: str) -> str | None:
    """The pip command that installs an optional top-level module, else None."""
    known = OPTIONAL.get(module.partition(".")[0])
    return f"pip install 'caption-debias[{known[1]}]' (or {known[0]})" if known else None


def missing_extra(exc: ModuleNotFoundError) -> UserError | None:
    """The one-line error for an optional package that is not installed, else None."""
    hint = install_hint(exc.name or "")
    return UserError(f"{exc.name} is not installed: {hint}") if hint else None


def require(module: str, what: str) -> ModuleType:
    """import `module`, or a UserError saying that `what` needs it and which extra brings it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        hint = install_hint(module)
        if hint is None or (exc.name or "").partition(".")[0] != module.partition(".")[0]:
            raise
        raise UserError(f"{what} needs {module}: {hint}") from None
