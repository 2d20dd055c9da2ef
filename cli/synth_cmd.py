"""`caption-debias synth`: write a synthetic long-caption world in the ShareGPT4V layout.

The command line's own: `synth OUT`, the older spelling of --out, kept as a hidden argument.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import Command, Param, out_param
from caption_debias.synth.options import SynthOptions


def _synth(options: SynthOptions, out_arg: Optional[Path], out: Optional[Path]) -> None:
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
    info = run_synth(out, options)
    if not options.quiet:
        typer.echo(
            f"wrote {info['images']} images in {info['groups']} groups "
            f"({info['mean_sentences']:.1f} sentences a caption) to {info['path']}"
        )
        if "planted" in info:
            counts = ", ".join(f"{count} {kind}" for kind, count in info["planted"].items())
            typer.echo(f"planted {counts}; the key is in {info['planted_path']}")


synth = Command(
    SynthOptions,
    _synth,
    args=(Param("out_arg", Optional[Path], typer.Argument(None, hidden=True, show_default=False)),),
    out=out_param("Output folder: OUT/sharegpt4v.json and OUT/images/ are written there.", None, Optional[Path]),
)
