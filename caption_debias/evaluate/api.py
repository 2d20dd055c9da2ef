"""`caption_debias.evaluate(...)`: the Python form of `caption-debias eval` (docs/api.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from caption_debias.api import Result, as_list, options_from

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
    `data` holds the results as eval writes them to --out; counts: models, data sets.
    """
    from caption_debias.evaluate.options import EvalOptions
    from caption_debias.evaluate.run import evaluate_models
    from caption_debias.evaluate.suite import output_json

    if options is None:
        if "benchmark" in kwargs:
            kwargs["benchmark"] = as_list(kwargs["benchmark"])
        if kwargs.get("image_root") is not None:
            kwargs["image_root"] = str(kwargs["image_root"])
        kwargs.setdefault("quiet", True)
        options = options_from(EvalOptions, kwargs, "evaluate", data=as_list(data))
    elif kwargs or as_list(data):
        raise TypeError("evaluate(): give the options as one EvalOptions or as keyword arguments, not both")
    model_list = as_list(models)
    log = (lambda _m: None) if options.quiet else (lambda m: print(m, file=sys.stderr))
    specs, results = evaluate_models(model_list, options, log=log)
    written = output_json(results)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(written, indent=2), "utf-8")
    counts = {"models": len(model_list), "data_sets": len(specs)}
    return Result("evaluate", out, counts, {"results": out} if out is not None else {}, written)
