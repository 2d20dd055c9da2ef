"""`caption-debias synth`: write a synthetic long-caption world in the ShareGPT4V layout.

Every option's default and help text come from its SynthOptions field (synth/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.synth.options import SynthOptions


def synth(
    ctx: typer.Context,
    out_arg: Optional[Path] = typer.Argument(None, hidden=True, show_default=False),
    out: Optional[Path] = out_option("Output folder: OUT/sharegpt4v.json and OUT/images/ are written there.", None),
    n: int = from_field(SynthOptions, "n"),
    seed: int = from_field(SynthOptions, "seed"),
    image_size: int = from_field(SynthOptions, "image_size"),
    split: str = from_field(SynthOptions, "split"),
    group_size: int = from_field(SynthOptions, "group_size"),
    world: str = from_field(SynthOptions, "world"),
    overwrite: bool = from_field(SynthOptions, "overwrite"),
    plant: bool = from_field(SynthOptions, "plant"),
    plant_hallucinated: Optional[float] = from_field(SynthOptions, "plant_hallucinated"),
    plant_mismatched: Optional[float] = from_field(SynthOptions, "plant_mismatched"),
    plant_redrawn: Optional[float] = from_field(SynthOptions, "plant_redrawn"),
    plant_curate_faults: bool = from_field(SynthOptions, "plant_curate_faults"),
    plant_eval_leaks: Optional[str] = from_field(SynthOptions, "plant_eval_leaks"),
    quiet: bool = from_field(SynthOptions, "quiet"),
    config: Optional[Path] = config_option(),
) -> None:
    """Write a synthetic long-caption dataset (shape scenes drawn with PIL) that `prepare` reads as ShareGPT4V."""
    from caption_debias.errors import UserError
    from caption_debias.synth.world import run_synth

    if out_arg is not None:  # the older spelling `synth OUT`
        if out is not None:
            raise UserError("give the output folder once: --out OUT")
        typer.echo("caption-debias synth: OUT as an argument is now --out OUT (the old spelling still works)", err=True)
        out = out_arg
    if out is None:
        raise UserError("missing --out OUT (the folder to write the world into)")
    info = run_synth(out, options_from_params(SynthOptions, ctx))
    if not quiet:
        typer.echo(
            f"wrote {info['images']} images in {info['groups']} groups "
            f"({info['mean_sentences']:.1f} sentences a caption) to {info['path']}"
        )
        if "planted" in info:
            counts = ", ".join(f"{count} {kind}" for kind, count in info["planted"].items())
            typer.echo(f"planted {counts}; the key is in {info['planted_path']}")
