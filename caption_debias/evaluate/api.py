"""`caption_debias.evaluate(...)`: the Python form of `caption-debias eval` (docs/api.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from caption_debias.api import Result, as_list


def evaluate(
    models: str | Iterable[str],
    data: str | Path | Iterable[str | Path] = (),
    *,
    benchmark: str | Iterable[str] = (),
    image_root: str | Path | None = None,
    variants: str = "keep",
    out: str | Path | None = None,
    batch_size: int = 64,
    context_length: int | None = None,
    pretrained: str | None = None,
    device: str = "auto",
    segmenter: str = "fast",
    templates: str = "openai",
    recall_rule: str = "pessimistic",
    quiet: bool = True,
) -> Result:
    """Retrieval recall@1/5/10 both ways (zero-shot accuracy for imagefolder) of models on data sets.

    `data` and `benchmark` pair up as eval's --data / --benchmark (no benchmark: prepared folders).
    `data` holds the results as eval writes them to --out; counts: models, data sets.
    """
    from caption_debias.evaluate.suite import output_json, pair_data, run_eval
    from caption_debias.evaluate.variants import parse_variants

    specs = pair_data(as_list(benchmark), as_list(data), Path(image_root) if image_root is not None else None)
    model_list = as_list(models)
    log = (lambda _m: None) if quiet else (lambda m: print(m, file=__import__("sys").stderr))
    results = run_eval(
        model_list,
        specs,
        parse_variants(variants),
        pretrained=pretrained,
        context_length=context_length,
        device=device,
        batch_size=batch_size,
        segmenter=segmenter,
        template_set=templates,
        recall_rule=recall_rule,
        log=log,
    )
    written = output_json(results)
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(written, indent=2), "utf-8")
    counts = {"models": len(model_list), "data_sets": len(specs)}
    return Result("evaluate", out, counts, {"results": out} if out is not None else {}, written)
