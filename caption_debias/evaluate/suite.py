"""Several models x several data sets in one call: what `caption-debias eval` and `probe` run.

Data sets are read once; models are loaded one at a time (and freed) so large models on
large sets do not all sit in memory together.
"""

from __future__ import annotations

import gc
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.evaluate.benchmarks import BENCHMARKS, load_benchmark
from caption_debias.model.names import warn_random_weights
from caption_debias.progress import DEFAULT_INTERVAL, Progress, active, note

ZEROSHOT = "imagefolder"  # folder-per-class zero-shot classification
DATA_KINDS = ("prepared", *BENCHMARKS, ZEROSHOT)


@dataclass
class DataSpec:
    benchmark: str  # "prepared", a name in BENCHMARKS, or ZEROSHOT
    path: Path
    image_root: Path | str | None = None  # as given: resolved by the loaders (image_source.roots)

    @property
    def label(self) -> str:
        """Key in tables and JSON: a prepared or class folder's name, else the benchmark name."""
        return self.path.name if self.benchmark in ("prepared", ZEROSHOT) else self.benchmark


def pair_data(benchmarks: Sequence[str], paths: Sequence[str | Path], image_root: Path | str | None) -> list[DataSpec]:
    """--benchmark/--data given in pairs; no --benchmark at all means every --data is a prepared folder."""
    if not paths:
        raise UserError("give --data (a prepared folder with --image-root, or a benchmark layout with --benchmark)")
    if not benchmarks:
        benchmarks = ["prepared"] * len(paths)
    if len(benchmarks) != len(paths):
        raise UserError(f"--benchmark given {len(benchmarks)} times but --data {len(paths)} times: give them in pairs")
    for b in benchmarks:
        if b not in DATA_KINDS:
            raise UserError(f"unknown benchmark {b!r} (choose from {', '.join(DATA_KINDS)})")
    # a prepared folder may be an fsspec URL (caption_debias.storage); benchmark layouts are local
    specs = [
        DataSpec(b, storage.as_path(p) if b == "prepared" else Path(p), image_root) for b, p in zip(benchmarks, paths)
    ]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise UserError(f"the same data set is named twice: {', '.join(labels)}")
    return specs


def model_labels(specs: Sequence[str]) -> list[str]:
    """Short unique names for the table and JSON: a run folder's name, else the spec as given."""
    labels: list[str] = []
    for spec in specs:
        p = Path(spec)
        base = p.name if p.is_dir() and not spec.startswith(("local-dir:", "hf-hub:")) else spec
        label, n = base, 2
        while label in labels:
            label, n = f"{base}#{n}", n + 1
        labels.append(label)
    return labels


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", name):
        raise UserError(f"--device {name!r}: use auto, cpu, cuda, cuda:N or mps")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {name}: no CUDA device here")
    return name


def load_data(spec: DataSpec, segmenter: str):
    if spec.benchmark == ZEROSHOT:
        return spec.path  # read per model (its preprocess) by zeroshot()
    return load_benchmark(spec.benchmark, spec.path, spec.image_root, segmenter)


def run_eval(
    model_specs: Sequence[str],
    data_specs: Sequence[DataSpec],
    variants: Sequence[str],
    *,
    pretrained: str | None = None,
    context_length: int | None = None,
    device: str = "auto",
    batch_size: int = 64,
    segmenter: str = "fast",
    template_set: str = "openai",
    recall_rule: str = "pessimistic",
    log: Callable[[str], None] = lambda _m: None,
    progress: bool = False,
    log_interval: float = DEFAULT_INTERVAL,
) -> dict[str, dict[str, Any]]:
    """{model label: {data label: {variant: {t2i, i2t, recall_rule}} or zero-shot {top1, top5, ...}}}.

    `progress`: images and texts encoded, on a rich bar or in plain lines every `log_interval` s."""
    from caption_debias.evaluate.metrics import RULES

    if recall_rule not in RULES:
        raise UserError(f"--recall-rule {recall_rule!r}: choose from {', '.join(RULES)}")
    with Progress("eval", "rows", quiet=not progress, interval=log_interval, phases=True):
        note(f"reading {', '.join(str(ds.path) for ds in data_specs)}")  # checked, before torch is imported
        return _run_eval(
            model_specs, data_specs, variants, pretrained, context_length, device, batch_size, segmenter,
            template_set, recall_rule, log, quiet=not progress,
        )  # fmt: skip


def _run_eval(
    model_specs, data_specs, variants, pretrained, context_length, device, batch_size, segmenter, template_set,
    recall_rule, log, quiet=True,
) -> dict[str, dict[str, Any]]:  # fmt: skip
    from caption_debias.model.imports import import_open_clip

    import_open_clip([(spec, pretrained) for spec in model_specs], note)  # said: seconds under load
    from caption_debias.evaluate.retrieval import run_retrieval
    from caption_debias.evaluate.zeroshot import zeroshot
    from caption_debias.model.describe import describe, stretch_note
    from caption_debias.model.load import load_model, no_weights_warnings

    device = resolve_device(device)
    datasets = {}
    for ds in data_specs:
        datasets[ds.label] = load_data(ds, segmenter)
        d = datasets[ds.label]
        if not isinstance(d, Path):
            d.check_images()
            log(f"{ds.label}: {d.n_images} images, {len(d.captions)} captions ({d.definition})")
    counted = active()
    if counted is not None:  # every model reads every data set's rows; an image folder adds its own when opened
        rows = sum(len(d.captions) for d in datasets.values() if not isinstance(d, Path))
        counted.update(total=rows * len(model_specs) or None)
    results: dict[str, dict[str, Any]] = {}
    for label, spec in zip(model_labels(model_specs), model_specs):
        note(f"loading model {describe(spec, pretrained)}")
        with no_weights_warnings():  # said in the line below
            loaded = load_model(spec, pretrained, context_length, device=device, tell=note)
        warn_random_weights("eval", spec, pretrained, quiet)
        untrained = stretch_note(str(spec), loaded.info)
        if untrained:
            note(untrained)
        log(f"{label}: {loaded.name} on {device}, context {loaded.context_length}")
        results[label] = {}
        for name, d in datasets.items():
            if isinstance(d, Path):
                results[label][name] = zeroshot(loaded, d, template_set, batch_size)
            else:
                run = run_retrieval(loaded, d, variants, batch_size, recall_rule=recall_rule)
                # The rule travels with every figure, so a JSON file says how it was counted.
                results[label][name] = {v: {**r, "recall_rule": recall_rule} for v, r in run.table.items()}
                short = {v: n for v, n in run.short.items() if n}
                if short:
                    log(f"{label} / {name}: captions with too few sentences for a variant: {short}")
                d.image_features.pop(loaded.model, None)
        del loaded
        gc.collect()
    return results


def output_json(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One model on one data set: its table alone; otherwise the nested {MODEL: {DATA: ...}}."""
    if len(results) == 1:
        (per_data,) = results.values()
        if len(per_data) == 1:
            (table,) = per_data.values()
            return table
    return results


def run_probe(
    model_specs: Sequence[str],
    data_spec: DataSpec,
    report_dir: Path | None,
    *,
    pretrained: str | None = None,
    context_length: int | None = None,
    device: str = "auto",
    batch_size: int = 64,
    segmenter: str = "fast",
    progress: bool = False,
    log_interval: float = DEFAULT_INTERVAL,
) -> dict[str, Any]:
    from contextlib import nullcontext

    from caption_debias.locking import folder_lock
    from caption_debias.model.describe import describe

    if data_spec.benchmark == ZEROSHOT:
        raise UserError("probe needs captions: give a prepared folder or a retrieval benchmark, not imagefolder")
    # one writer per report folder, for the whole run
    with folder_lock(report_dir, "probe") if report_dir is not None else nullcontext():
        with Progress("probe", "rows", quiet=not progress, interval=log_interval, phases=True):
            note(f"reading {data_spec.path}")  # before torch is imported
            from caption_debias.model.imports import import_open_clip

            import_open_clip([(spec, pretrained) for spec in model_specs], note)
            from caption_debias.evaluate.probe import probe
            from caption_debias.model.load import load_model, no_weights_warnings

            device = resolve_device(device)
            data = load_data(data_spec, segmenter)
            counted = active()
            if counted is not None:  # the rows users count: every model reads every caption once
                counted.update(total=len(data.captions) * len(model_specs) or None)
            models = {}
            for label, spec in zip(model_labels(model_specs), model_specs):
                note(f"loading model {describe(spec, pretrained)}")
                with no_weights_warnings():  # said in the lines below
                    models[label] = load_model(spec, pretrained, context_length, device=device, tell=note)
            for spec in model_specs:
                warn_random_weights("probe", spec, pretrained, quiet=not progress)
            return probe(models, data, report_dir, batch_size=batch_size)
