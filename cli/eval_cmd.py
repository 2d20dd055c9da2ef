"""`caption-debias eval` and `caption-debias probe`: retrieval benchmarks and the bias probes.

Every option's default and help text come from its EvalOptions / ProbeOptions field (evaluate/options.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, options_from_params, out_option
from caption_debias.evaluate.options import EvalOptions, ProbeOptions

_MODELS_HELP = (
    "Models: a training run folder, demo-start (the shipped small model), local-dir:DIR, hf-hub:ORG/REPO, an "
    "open_clip name with --pretrained (e.g. ViT-B-16; tiny and a name without it are random weights) or a "
    "checkpoint file; several give one side-by-side table."
)


def evaluate(
    ctx: typer.Context,
    models: List[str] = typer.Argument(..., help=_MODELS_HELP),
    benchmark: List[str] = from_field(EvalOptions, "benchmark"),
    data: List[str] = from_field(EvalOptions, "data"),
    image_root: Optional[str] = from_field(EvalOptions, "image_root"),
    variants: str = from_field(EvalOptions, "variants"),
    out: Optional[Path] = out_option(
        "Write results as JSON here: {VARIANT: {t2i, i2t, recall_rule}} for one model on one data set, else {MODEL: {BENCHMARK: {VARIANT: ...}}}.",
        None,
    ),
    batch_size: int = from_field(EvalOptions, "batch_size"),
    context_length: Optional[int] = from_field(EvalOptions, "context_length"),
    pretrained: Optional[str] = from_field(EvalOptions, "pretrained"),
    device: str = from_field(EvalOptions, "device"),
    segmenter: str = from_field(EvalOptions, "segmenter"),
    templates: str = from_field(EvalOptions, "templates"),
    recall_rule: str = from_field(EvalOptions, "recall_rule"),
    quiet: bool = from_field(EvalOptions, "quiet"),
    log_interval: float = from_field(EvalOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Retrieval recall@1/5/10 both ways (and zero-shot accuracy) of one or more models."""
    from caption_debias.evaluate.api import evaluate as run_evaluate

    run_evaluate(models, out=out, options=options_from_params(EvalOptions, ctx))


def probe(
    ctx: typer.Context,
    models: List[str] = typer.Argument(
        ..., help=_MODELS_HELP + " Two models (e.g. a Long-CLIP run and a DeBias run) are shown side by side."
    ),
    data: str = from_field(ProbeOptions, "data"),
    out: Path = out_option(
        "Folder for probe.json, attention.png, filler.png and a self-contained index.html (rewritten each run)."
    ),
    benchmark: str = from_field(ProbeOptions, "benchmark"),
    image_root: Optional[str] = from_field(ProbeOptions, "image_root"),
    batch_size: int = from_field(ProbeOptions, "batch_size"),
    context_length: Optional[int] = from_field(ProbeOptions, "context_length"),
    pretrained: Optional[str] = from_field(ProbeOptions, "pretrained"),
    device: str = from_field(ProbeOptions, "device"),
    segmenter: str = from_field(ProbeOptions, "segmenter"),
    quiet: bool = from_field(ProbeOptions, "quiet"),
    log_interval: float = from_field(ProbeOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """The paper's bias probes: filler curve, sentence order, keep/move/remove, attention by position."""
    from caption_debias.evaluate.run import probe_models

    options = options_from_params(ProbeOptions, ctx).validate()  # flags and --data before torch loads
    result = probe_models(models, out, options)
    if not options.quiet:
        from rich.console import Console

        from caption_debias.evaluate.report import retrieval_table

        label = options.data_spec().label
        table = {m: {label: r["retrieval"]} for m, r in result["models"].items()}
        Console().print(retrieval_table(table, title="Bias probes: recall@1/5/10 (%)"))
        typer.echo(f"report: {result['files']['html']}")
