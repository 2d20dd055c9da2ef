"""EvalOptions and ProbeOptions: every option of `caption-debias eval` and `probe`, the one source of defaults and help.

The CLI (cli/eval_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; `caption_debias.evaluate(...)` builds the same EvalOptions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption_debias.errors import UserError
from caption_debias.options import LOG_INTERVAL_HELP, QUIET_HELP, option, required

if TYPE_CHECKING:
    from caption_debias.evaluate.suite import DataSpec

DEVICE_HELP = "auto (GPU when there is one), cpu, cuda, cuda:N."
PROBE_LAYOUTS_HELP = (
    "Layout of --data: prepared, urban1k, docci, dci, long-dci, coco, flickr30k, flickr30k-full, "
    "sharegpt4v-1k, sharegpt4v-1k-sam."
)


def _check_sizes(batch_size: int, context_length: int | None) -> None:
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {batch_size})")
    if context_length is not None and context_length < 2:
        raise UserError(f"--context-length must be at least 2 (got {context_length})")


def _image_root(image_root: str | Path | None) -> Path | None:
    return None if image_root is None else Path(image_root)


@dataclass
class EvalOptions:
    """Every option of `caption-debias eval` (the CLI reads defaults and --help from here)."""

    benchmark: list[str] = option(
        [],
        "Benchmark layout of the matching --data: urban1k, docci, dci, long-dci, coco, flickr30k, flickr30k-full, "
        "sharegpt4v-1k (first 1,000 records), sharegpt4v-1k-sam (first 1,000 SAM records), imagefolder "
        "(zero-shot classification), prepared. Repeat in pairs with --data; omit for prepared folders.",
    )
    data: list[str] = option([], "Benchmark root/file in its public layout, or a prepared folder. Repeatable.")
    image_root: str | None = option(
        None,
        "Image folder: required for a prepared folder whose manifest records none; overrides a benchmark's "
        "default image folder.",
    )
    variants: str = option(
        "keep", "Comma-separated caption variants: keep, remove, move, swap2, first2, first, filler:N."
    )
    batch_size: int = option(64, "Images per encoding batch (texts use at least 64).")
    context_length: int | None = option(
        None, "Text context length for open_clip model names (run folders and checkpoints keep their own)."
    )
    pretrained: str | None = option(
        None,
        "open_clip pretrained tag or weights file for a model name; the architecture name for a bare checkpoint file.",
    )
    device: str = option("auto", DEVICE_HELP)
    segmenter: str = option(
        "fast",
        "Sentence splitter for benchmark captions: fast, pysbd or spacy (prepared folders keep their sentences).",
    )
    templates: str = option("openai", "Zero-shot prompt templates: openai (80 ImageNet templates) or simple.")
    recall_rule: str = option(
        "pessimistic",
        "How tied scores count: pessimistic (against the query) or clip_benchmark (torch.topk, as "
        "CLIP_benchmark); named in the JSON.",
    )
    quiet: bool = option(False, QUIET_HELP)
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)

    def variant_names(self) -> list[str]:
        """--variants as a list of checked names (UserError on an unknown one)."""
        from caption_debias.evaluate.variants import parse_variants

        return parse_variants(self.variants)

    def data_specs(self) -> list[DataSpec]:
        """--benchmark/--data paired (UserError on a count mismatch, an unknown layout, a name given twice)."""
        from caption_debias.evaluate.suite import pair_data

        return pair_data(list(self.benchmark), list(self.data), _image_root(self.image_root))

    def validate(self) -> "EvalOptions":
        self.variant_names()
        self.data_specs()
        _check_sizes(self.batch_size, self.context_length)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProbeOptions:
    """Every option of `caption-debias probe` (the CLI reads defaults and --help from here)."""

    data: str = required("A prepared folder, or a benchmark layout with --benchmark (the paper uses DOCCI test).")
    benchmark: str = option("prepared", PROBE_LAYOUTS_HELP)
    image_root: str | None = option(None, "Image folder of a prepared folder (or to override a benchmark's).")
    batch_size: int = option(64, "Images per encoding batch.")
    context_length: int | None = option(None, "Text context length for open_clip model names.")
    pretrained: str | None = option(
        None, "open_clip pretrained tag or weights file (or the architecture of a bare checkpoint)."
    )
    device: str = option("auto", DEVICE_HELP)
    segmenter: str = option("fast", "Sentence splitter for benchmark captions: fast, pysbd or spacy.")
    quiet: bool = option(False, QUIET_HELP)
    log_interval: float = option(30.0, LOG_INTERVAL_HELP)

    def data_spec(self) -> DataSpec:
        """--data read as --benchmark says (UserError on an unknown layout)."""
        from caption_debias.evaluate.suite import pair_data

        (spec,) = pair_data([self.benchmark], [self.data], _image_root(self.image_root))
        return spec

    def validate(self) -> "ProbeOptions":
        self.data_spec()
        _check_sizes(self.batch_size, self.context_length)
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
