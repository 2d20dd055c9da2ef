"""`caption-debias eval` and `caption-debias probe`: retrieval benchmarks and the bias probes.

Every option's default and help text come from its EvalOptions / ProbeOptions field (evaluate/options.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, from_field, out_option
from caption_debias.evaluate.options import EvalOptions, ProbeOptions

_MODELS_HELP = (
    "Models: a training run folder, demo-start (the shipped small model), local-dir:DIR, hf-hub:ORG/REPO, an "
    "open_clip name with --pretrained (e.g. ViT-B-16; tiny and a name without it are random weights) or a "
    "checkpoint file; several give one side-by-side table."
)


def evaluate(
    models: List[str] = typer.Argument(..., help=_MODELS_HELP),
    benchmark: List[str] = from_field(EvalOptions, "benchmark", "--benchmark", "-b"),
    data: List[str] = from_field(EvalOptions, "data", "--data", "-d"),
    image_root: Optional[Path] = from_field(EvalOptions, "image_root"),
    variants: str = from_field(EvalOptions, "variants"),
    out: Optional[Path] = out_option(
        "Write results as JSON here: {VARIANT: {t2i, i2t, recall_rule}} for one model on one data set, else {MODEL: {BENCHMARK: {VARIANT: ...}}}.",
        None,
    ),
    batch_size: int = from_field(EvalOptions, "batch_size", min=1),
    context_length: Optional[int] = from_field(EvalOptions, "context_length", min=2),
    pretrained: Optional[str] = from_field(EvalOptions, "pretrained"),
    device: str = from_field(EvalOptions, "device"),
    segmenter: str = from_field(EvalOptions, "segmenter"),
    templates: str = from_field(EvalOptions, "templates"),
    recall_rule: str = from_field(EvalOptions, "recall_rule"),
    quiet: bool = from_field(EvalOptions, "quiet", "--quiet", "-q"),
    log_interval: float = from_field(EvalOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """Retrieval recall@1/5/10 both ways (and zero-shot accuracy) of one or more models."""
    from rich.console import Console

    from caption_debias.evaluate.report import retrieval_table, zeroshot_table
    from caption_debias.evaluate.run import evaluate_models
    from caption_debias.evaluate.suite import ZEROSHOT, output_json

    options = EvalOptions(
        benchmark=list(benchmark),
        data=list(data),
        image_root=None if image_root is None else str(image_root),
        variants=variants,
        batch_size=batch_size,
        context_length=context_length,
        pretrained=pretrained,
        device=device,
        segmenter=segmenter,
        templates=templates,
        recall_rule=recall_rule,
        quiet=quiet,
        log_interval=log_interval,
    )
    console = Console(stderr=True)
    specs, results = evaluate_models(
        models, options, log=(lambda m: None) if quiet else (lambda m: console.print(m, style="dim"))
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(output_json(results), indent=2), "utf-8")
    if not quiet:
        zs = {s.label for s in specs if s.benchmark == ZEROSHOT}
        retrieval = {m: {d: r for d, r in per.items() if d not in zs} for m, per in results.items()}
        classification = {m: {d: r for d, r in per.items() if d in zs} for m, per in results.items()}
        if any(retrieval.values()):
            Console().print(retrieval_table(retrieval))
        if any(classification.values()):
            Console().print(zeroshot_table(classification))


def probe(
    models: List[str] = typer.Argument(
        ..., help=_MODELS_HELP + " Two models (e.g. a Long-CLIP run and a DeBias run) are shown side by side."
    ),
    data: str = from_field(ProbeOptions, "data", "--data", "-d"),
    out: Path = out_option(
        "Folder for probe.json, attention.png, filler.png and a self-contained index.html (rewritten each run)."
    ),
    benchmark: str = from_field(ProbeOptions, "benchmark", "--benchmark", "-b"),
    image_root: Optional[Path] = from_field(ProbeOptions, "image_root"),
    batch_size: int = from_field(ProbeOptions, "batch_size", min=1),
    context_length: Optional[int] = from_field(ProbeOptions, "context_length", min=2),
    pretrained: Optional[str] = from_field(ProbeOptions, "pretrained"),
    device: str = from_field(ProbeOptions, "device"),
    segmenter: str = from_field(ProbeOptions, "segmenter"),
    quiet: bool = from_field(ProbeOptions, "quiet", "--quiet", "-q"),
    log_interval: float = from_field(ProbeOptions, "log_interval"),
    config: Optional[Path] = config_option(),
) -> None:
    """The paper's bias probes: filler curve, sentence order, keep/move/remove, attention by position."""
    from rich.console import Console

    from caption_debias.evaluate.report import retrieval_table
    from caption_debias.evaluate.run import probe_models

    options = ProbeOptions(
        data=data,
        benchmark=benchmark,
        image_root=None if image_root is None else str(image_root),
        batch_size=batch_size,
        context_length=context_length,
        pretrained=pretrained,
        device=device,
        segmenter=segmenter,
        quiet=quiet,
        log_interval=log_interval,
    )
    result = probe_models(models, out, options)
    if not quiet:
        label = options.data_spec().label
        table = {m: {label: r["retrieval"]} for m, r in result["models"].items()}
        Console().print(retrieval_table(table, title="Bias probes: recall@1/5/10 (%)"))
        typer.echo(f"report: {result['files']['html']}")
