"""`caption-debias eval` and `probe` from their options objects (evaluate/options.py): checked, then run by suite.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from caption_debias.evaluate.options import EvalOptions, ProbeOptions
from caption_debias.evaluate.suite import DataSpec, run_eval, run_probe


def evaluate_models(
    model_specs: Sequence[str], options: EvalOptions, log: Callable[[str], None] = lambda _m: None
) -> tuple[list[DataSpec], dict[str, dict[str, Any]]]:
    """`caption-debias eval`: the options checked, then run_eval; returns the paired data sets and the results."""
    options.validate()
    specs = options.data_specs()
    results = run_eval(
        model_specs,
        specs,
        options.variant_names(),
        pretrained=options.pretrained,
        context_length=options.context_length,
        device=options.device,
        batch_size=options.batch_size,
        segmenter=options.segmenter,
        template_set=options.templates,
        recall_rule=options.recall_rule,
        log=log,
        progress=not options.quiet,
        log_interval=options.log_interval,
    )
    return specs, results


def probe_models(model_specs: Sequence[str], report_dir: Path | None, options: ProbeOptions) -> dict[str, Any]:
    """`caption-debias probe`: the options checked, then run_probe."""
    options.validate()
    return run_probe(
        model_specs,
        options.data_spec(),
        report_dir,
        pretrained=options.pretrained,
        context_length=options.context_length,
        device=options.device,
        batch_size=options.batch_size,
        segmenter=options.segmenter,
        progress=not options.quiet,
        log_interval=options.log_interval,
    )
