"""`caption-debias score`: model signals per row (docs/curation.md, "Model signals").

Every option's default and help text come from its ScoreOptions field (score/options.py).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, List, Optional

import typer

from caption_debias.score.options import ScoreOptions

_FIELDS = {f.name: f for f in fields(ScoreOptions)}


def _option(name: str, *flags: str) -> Any:
    """typer.Option for ScoreOptions field `name`: default and help from the field, flag --name-with-dashes."""
    f = _FIELDS[name]
    return typer.Option(f.default, *(flags or (f"--{name.replace('_', '-')}",)), help=f.metadata["help"])


def score(
    inputs: List[str] = typer.Argument(
        ..., help="Prepared (or curated) folders, scored in order as one input.", show_default=False
    ),
    out: str = typer.Option(
        ...,
        "--out",
        "-o",
        help="Output folder: shards with the score columns, manifest.json (with the model's identity) and removed.jsonl.",
    ),
    model: str = _option("model"),
    pretrained: Optional[str] = _option("pretrained"),
    image_root: Optional[str] = _option("image_root"),
    batch_size: int = _option("batch_size"),
    device: str = _option("device"),
    precision: str = _option("precision"),
    workers: int = _option("workers", "--workers", "-j"),
    engine: str = _option("engine"),
    ray_address: Optional[str] = _option("ray_address"),
    keep_embeddings: bool = _option("keep_embeddings"),
    reference_images: int = _option("reference_images"),
    seed: int = _option("seed"),
    decode_threads: int = _option("decode_threads"),
    overwrite: bool = _option("overwrite"),
    quiet: bool = _option("quiet", "--quiet", "-q"),
    log_interval: float = _option("log_interval"),
) -> None:
    """Score every row with an open_clip model: image-caption alignment, per-sentence scores and grounding."""
    values = {k: v for k, v in locals().items() if k not in ("inputs", "out")}
    from caption_debias.score.run import score_folder

    score_folder([str(p) for p in inputs], out, ScoreOptions(**values))
