"""`caption-debias eval` and `caption-debias probe`: retrieval benchmarks and the bias probes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from caption_debias.cli.common import Command, argument, out_param
from caption_debias.evaluate.options import EvalOptions, ProbeOptions

_MODELS_HELP = (
    "Models: a training run folder, demo-start (the shipped small model), local-dir:DIR, hf-hub:ORG/REPO, an "
    "open_clip name with --pretrained (e.g. ViT-B-16; tiny and a name without it are random weights) or a "
    "checkpoint file; several give one side-by-side table."
)


def _evaluate(options: EvalOptions, models: list[str], out: Optional[Path]) -> None:
    """Retrieval recall@1/5/10 both ways (and zero-shot accuracy) of one or more models."""
    from caption_debias.evaluate.api import evaluate

    evaluate(models, out=out, options=options)


def _probe(options: ProbeOptions, models: list[str], out: Path) -> None:
    """The paper's bias probes: filler curve, sentence order, keep/move/remove, attention by position."""
    from caption_debias.evaluate.run import probe_models

    result = probe_models(models, out, options.validate())  # flags and --data before torch loads
    if not options.quiet:
        from rich.console import Console

        from caption_debias.evaluate.report import retrieval_table

        label = options.data_spec().label
        table = {m: {label: r["retrieval"]} for m, r in result["models"].items()}
        Console().print(retrieval_table(table, title="Bias probes: recall@1/5/10 (%)"))
        typer.echo(f"report: {result['files']['html']}")


evaluate = Command(
    EvalOptions,
    _evaluate,
    args=(argument("models", list[str], _MODELS_HELP),),
    out=out_param(
        "Write results as JSON here: {VARIANT: {t2i, i2t, recall_rule}} for one model on one data set, else {MODEL: {BENCHMARK: {VARIANT: ...}}}.",
        None,
        Optional[Path],
    ),
)
probe = Command(
    ProbeOptions,
    _probe,
    args=(
        argument(
            "models",
            list[str],
            _MODELS_HELP + " Two models (e.g. a Long-CLIP run and a DeBias run) are shown side by side.",
        ),
    ),
    out=out_param(
        "Folder for probe.json, attention.png, filler.png and a self-contained index.html (rewritten each run).",
        annotation=Path,
    ),
    renamed={"--report": "--out", "-r": "--out"},
)
