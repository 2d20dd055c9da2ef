"""caption-debias: long-caption data preparation and DeBias-CLIP fine-tuning.

The Python API (docs/api.md): `caption_debias.prepare(...)`, `curate`, `score`, `pack`, `stats`,
`train` and `evaluate`, the CLI's commands with its options in Python spelling, each returning
a `Result`. They load on first use, so importing the package stays light (no torch).
"""

__version__ = "0.1.0"

_STAGES = ("prepare", "curate", "score", "pack", "stats", "train", "evaluate", "ablate")
__all__ = [*_STAGES, "Result", "__version__"]


def __getattr__(name: str):
    if name in _STAGES:  # the stage's package, made callable (caption_debias/api.py)
        import importlib

        return importlib.import_module(f"caption_debias.{name}")
    if name == "Result":
        from caption_debias.api import Result

        return Result
    raise AttributeError(f"module 'caption_debias' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
