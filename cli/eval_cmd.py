"""`caption-debias eval` and `caption-debias probe`: retrieval benchmarks and the bias probes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from caption_debias.cli.common import config_option, log_interval_option, out_option, quiet_option

_MODELS_HELP = (
    "Models: a training run folder, local-dir:DIR, hf-hub:ORG/REPO, an open_clip name (e.g. tiny, ViT-B-16) "
    "or a checkpoint file; several give one side-by-side table."
)


def evaluate(
    models: List[str] = typer.Argument(..., help=_MODELS_HELP),
    benchmark: List[str] = typer.Option(
        [],
        "--benchmark",
        "-b",
        help="Benchmark layout of the matching --data: urban1k, docci, dci, long-dci, coco, flickr30k, flickr30k-full, sharegpt4v-1k (first 1,000 records), sharegpt4v-1k-sam (first 1,000 SAM records), imagefolder (zero-shot classification), prepared. Repeat in pairs with --data; omit for prepared folders.",
    ),
    data: List[str] = typer.Option(
        [], "--data", "-d", help="Benchmark root/file in its public layout, or a prepared folder. Repeatable."
    ),
    image_root: Optional[Path] = typer.Option(
        None,
        "--image-root",
        help="Image folder: required for a prepared folder whose manifest records none; overrides a benchmark's default image folder.",
    ),
    variants: str = typer.Option(
        "keep",
        "--variants",
        help="Comma-separated caption variants: keep, remove, move, swap2, first2, first, filler:N.",
    ),
    out: Optional[Path] = out_option(
        "Write results as JSON here: {VARIANT: {t2i, i2t, recall_rule}} for one model on one data set, else {MODEL: {BENCHMARK: {VARIANT: ...}}}.",
        None,
    ),
    batch_size: int = typer.Option(
        64, "--batch-size", min=1, help="Images per encoding batch (texts use at least 64)."
    ),
    context_length: Optional[int] = typer.Option(
        None,
        "--context-length",
        min=2,
        help="Text context length for open_clip model names (run folders and checkpoints keep their own).",
    ),
    pretrained: Optional[str] = typer.Option(
        None,
        "--pretrained",
        help="open_clip pretrained tag or weights file for a model name; the architecture name for a bare checkpoint file.",
    ),
    device: str = typer.Option("auto", "--device", help="auto (GPU when there is one), cpu, cuda, cuda:N."),
    segmenter: str = typer.Option(
        "fast",
        "--segmenter",
        help="Sentence splitter for benchmark captions: fast, pysbd or spacy (prepared folders keep their sentences).",
    ),
    templates: str = typer.Option(
        "openai", "--templates", help="Zero-shot prompt templates: openai (80 ImageNet templates) or simple."
    ),
    recall_rule: str = typer.Option(
        "pessimistic",
        "--recall-rule",
        help="How tied scores count: pessimistic (against the query) or clip_benchmark (torch.topk, as CLIP_benchmark); named in the JSON.",
    ),
    quiet: bool = quiet_option(),
    log_interval: float = log_interval_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """Retrieval recall@1/5/10 both ways (and zero-shot accuracy) of one or more models."""
    from rich.console import Console

    from caption_debias.evaluate.report import retrieval_table, zeroshot_table
    from caption_debias.evaluate.suite import ZEROSHOT, output_json, pair_data, run_eval
    from caption_debias.evaluate.variants import parse_variants

    console = Console(stderr=True)
    names = parse_variants(variants)
    specs = pair_data(benchmark, data, image_root)
    results = run_eval(
        models,
        specs,
        names,
        pretrained=pretrained,
        context_length=context_length,
        device=device,
        batch_size=batch_size,
        segmenter=segmenter,
        template_set=templates,
        recall_rule=recall_rule,
        log=(lambda m: None) if quiet else (lambda m: console.print(m, style="dim")),
        progress=not quiet,
        log_interval=log_interval,
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
    data: str = typer.Option(
        ...,
        "--data",
        "-d",
        help="A prepared folder, or a benchmark layout with --benchmark (the paper uses DOCCI test).",
    ),
    out: Path = out_option(
        "Folder for probe.json, attention.png, filler.png and a self-contained index.html (rewritten each run)."
    ),
    benchmark: str = typer.Option(
        "prepared",
        "--benchmark",
        "-b",
        help="Layout of --data: prepared, urban1k, docci, dci, long-dci, coco, flickr30k, flickr30k-full, sharegpt4v-1k, sharegpt4v-1k-sam.",
    ),
    image_root: Optional[Path] = typer.Option(
        None, "--image-root", help="Image folder of a prepared folder (or to override a benchmark's)."
    ),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Images per encoding batch."),
    context_length: Optional[int] = typer.Option(
        None, "--context-length", min=2, help="Text context length for open_clip model names."
    ),
    pretrained: Optional[str] = typer.Option(
        None,
        "--pretrained",
        help="open_clip pretrained tag or weights file (or the architecture of a bare checkpoint).",
    ),
    device: str = typer.Option("auto", "--device", help="auto (GPU when there is one), cpu, cuda, cuda:N."),
    segmenter: str = typer.Option(
        "fast", "--segmenter", help="Sentence splitter for benchmark captions: fast, pysbd or spacy."
    ),
    quiet: bool = quiet_option(),
    log_interval: float = log_interval_option(),
    config: Optional[Path] = config_option(),
) -> None:
    """The paper's bias probes: filler curve, sentence order, keep/move/remove, attention by position."""
    from rich.console import Console

    from caption_debias.evaluate.report import retrieval_table
    from caption_debias.evaluate.suite import pair_data, run_probe

    (spec,) = pair_data([benchmark], [data], image_root)
    result = run_probe(
        models,
        spec,
        out,
        pretrained=pretrained,
        context_length=context_length,
        device=device,
        batch_size=batch_size,
        segmenter=segmenter,
        progress=not quiet,
        log_interval=log_interval,
    )
    if not quiet:
        table = {m: {spec.label: r["retrieval"]} for m, r in result["models"].items()}
        Console().print(retrieval_table(table, title="Bias probes: recall@1/5/10 (%)"))
        typer.echo(f"report: {result['files']['html']}")
