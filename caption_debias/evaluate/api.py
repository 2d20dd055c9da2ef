"""`caption_debias.evaluate(...)`: the Python form of `caption-debias eval`, and its one front door (docs/api.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from caption_debias.api import Result, as_list, options_from, quiet_logs

if TYPE_CHECKING:
    from caption_debias.evaluate.options import EvalOptions


def evaluate(
    models: str | Iterable[str],
    data: str | Path | Iterable[str | Path] = (),
    *,
    out: str | Path | None = None,
    options: EvalOptions | None = None,
    **kwargs: Any,
) -> Result:
    """Retrieval recall@1/5/10 both ways (zero-shot accuracy for imagefolder) of models on data sets.

    The options are eval's flags (EvalOptions: `benchmark`, `image_root`, `variants`, `batch_size`,
    ...; `quiet` defaults to True here), as keyword arguments or as one EvalOptions in `options`.
    `data` and `benchmark` pair up as eval's --data / --benchmark (no benchmark: prepared folders).
    `data` holds the results as eval writes them to --out; counts: models, data sets. With
    quiet=False the data sets and models are described on stderr and the tables printed, as the
    command does.
    """
    from caption_debias.evaluate.options import EvalOptions

    if options is not None and as_list(data):
        raise TypeError("evaluate(): give the options as one EvalOptions or as keyword arguments, not both")
    if options is None:
        if "benchmark" in kwargs:
            kwargs["benchmark"] = as_list(kwargs["benchmark"])
        if kwargs.get("image_root") is not None:
            kwargs["image_root"] = str(kwargs["image_root"])
        kwargs["data"] = as_list(data)
    options = options_from(EvalOptions, kwargs, "evaluate", options).validate()  # before torch loads
    from rich.console import Console

    from caption_debias.evaluate.run import evaluate_models
    from caption_debias.evaluate.suite import output_json

    model_list = as_list(models)
    log = (lambda _m: None) if options.quiet else (lambda m: Console(stderr=True).print(m, style="dim"))
    with quiet_logs(options.quiet):
        specs, results = evaluate_models(model_list, options, log=log)
    written = output_json(results)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(written, indent=2), "utf-8")
    if not options.quiet:
        _print_tables(specs, results)
    counts = {"models": len(model_list), "data_sets": len(specs)}
    return Result("evaluate", out, counts, {"results": out} if out is not None else {}, written)


def _print_tables(specs: list, results: dict[str, dict[str, Any]]) -> None:
    """Retrieval recalls, then zero-shot accuracies, one table each (stdout)."""
    from rich.console import Console

    from caption_debias.evaluate.report import retrieval_table, zeroshot_table
    from caption_debias.evaluate.suite import ZEROSHOT

    zeroshot = {s.label for s in specs if s.benchmark == ZEROSHOT}
    retrieval = {m: {d: r for d, r in per.items() if d not in zeroshot} for m, per in results.items()}
    classification = {m: {d: r for d, r in per.items() if d in zeroshot} for m, per in results.items()}
    if any(retrieval.values()):
        Console().print(retrieval_table(retrieval))
    if any(classification.values()):
        Console().print(zeroshot_table(classification))
