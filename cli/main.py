"""Entry point: builds the Typer app from one module per command.

Command modules import the library inside their functions, so `--help` stays fast
(no torch import until a command that needs it runs).
"""

from __future__ import annotations

import sys

import typer

from caption_debias import __version__
from caption_debias.cli import (
    ablate_cmd,
    curate_cmd,
    demo_cmd,
    eval_cmd,
    export_cmd,
    pack_cmd,
    prepare_cmd,
    score_cmd,
    stats_cmd,
    synth_cmd,
    train_cmd,
    urls_cmd,
    view_cmd,
)
from caption_debias.cli.common import CONTEXT_SETTINGS, add_command
from caption_debias.errors import UserError
from caption_debias.extras import missing_extra

app = typer.Typer(
    name="caption-debias",
    help="Long-caption data preparation and DeBias-CLIP fine-tuning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT_SETTINGS,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"caption-debias {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Long-caption data preparation and DeBias-CLIP fine-tuning."""


# Each command is built from its options class (cli/common.py Command); old flag spellings stay as
# hidden aliases that print one line (its `renamed`).
add_command(app, "prepare", prepare_cmd.prepare)
add_command(app, "stats", stats_cmd.stats)
add_command(app, "curate", curate_cmd.curate)
add_command(app, "score", score_cmd.score)
add_command(app, "train", train_cmd.train)
add_command(app, "export", export_cmd.export)
add_command(app, "eval", eval_cmd.evaluate)
add_command(app, "probe", eval_cmd.probe)
add_command(app, "synth", synth_cmd.synth)
add_command(app, "demo", demo_cmd.demo)
add_command(app, "urls", urls_cmd.urls)
add_command(app, "export-captions", urls_cmd.export_captions)
add_command(app, "pack", pack_cmd.pack)
add_command(app, "view", view_cmd.view)
add_command(app, "ablate", ablate_cmd.ablate)


def main() -> None:
    """Console script: user errors become one red line on stderr and a non-zero exit."""
    try:
        app()
    except UserError as exc:
        typer.secho(f"caption-debias: error: {exc}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except ModuleNotFoundError as exc:  # an optional package (torch, spaCy, Ray, ...): name the extra
        error = missing_extra(exc)
        if error is None:
            raise
        typer.secho(f"caption-debias: error: {error}", fg="red", err=True)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        typer.secho("caption-debias: interrupted", fg="red", err=True)
        sys.exit(130)
    except OSError as exc:  # a disk or permission fault no library code turned into its own line
        where = f"{exc.filename}: " if exc.filename else ""
        typer.secho(f"caption-debias: error: {where}{exc.strerror or exc}", fg="red", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
