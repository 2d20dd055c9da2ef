"""`caption-debias train`: parse options (and --config), call the library.

Every flag is a TrainConfig field (train/config.py), so the command line, config files and the Python
API share one definition. Two things are the command line's own: DATA is the `data` field given as
a positional argument, and --no-tensorboard is an older spelling kept hidden.
"""

from __future__ import annotations

import typer

from caption_debias.cli.common import Command, Param
from caption_debias.train.config import TrainConfig, older_keys


def _train(options: TrainConfig, no_tensorboard: bool) -> None:
    """Fine-tune an open_clip model on a prepared folder (DeBias-CLIP, Long-CLIP or plain CLIP)."""
    from caption_debias.errors import UserError
    from caption_debias.train.api import train

    if no_tensorboard:
        options.report_to = ",".join(r for r in options.report_to.split(",") if r.strip() != "tensorboard")
    if options.grad_clip == 0:  # "0 turns it off"
        options.grad_clip = None
    if not options.data:
        raise UserError("missing DATA (a prepared folder), on the command line or in --config")
    result = train(options=options)
    if not options.quiet:
        typer.echo(str(result.out))


train = Command(
    TrainConfig,
    _train,
    args=("data",),
    hidden=(
        Param(
            "no_tensorboard",
            bool,
            typer.Option(
                False, "--no-tensorboard", hidden=True, help="Older spelling: leave tensorboard out of --report-to."
            ),
        ),
    ),
    translate=older_keys,
)
