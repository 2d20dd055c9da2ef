"""Entry point: builds the Typer app from one module per command.

Command modules import the library inside their functions, so `--help` stays fast
(no torch import until a command that needs it runs).
"""

from __future__ import annotations

import sys

import typer

from caption_debias import __version__
from caption_debias.cli import (
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
)
from caption_debias.errors import UserError
from caption_debias.extras import missing_extra

app = typer.Typer(
    name="caption-debias",
    help="Long-caption data preparation and DeBias-CLIP fine-tuning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
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


app.command("prepare")(prepare_cmd.prepare)
app.command("stats")(stats_cmd.stats)
app.command("curate")(curate_cmd.curate)
app.command("score", context_settings={"help_option_names": ["-h", "--help"]})(score_cmd.score)
app.command("train")(train_cmd.train)
app.command("export")(export_cmd.export)
app.command("eval")(eval_cmd.evaluate)
app.command("probe")(eval_cmd.probe)
app.command("synth")(synth_cmd.synth)
app.command("demo")(demo_cmd.demo)
app.command("urls")(urls_cmd.urls)
app.command("export-captions")(urls_cmd.export_captions)
app.command("pack")(pack_cmd.pack)


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
