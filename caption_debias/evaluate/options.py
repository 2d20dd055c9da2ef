"""EvalOptions and ProbeOptions: every option of `caption-debias eval` and `probe`, the one source of defaults and help.

The CLI (cli/eval_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's; `caption_debias.evaluate(...)` builds the same EvalOptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from caption_debias.errors import UserError
from caption_debias.options import ImageRootOptions, ProgressOptions, check_device_name, option, required
from caption_debias.text.segment import SEGMENTERS

if TYPE_CHECKING:
    from caption_debias.evaluate.suite import DataSpec

DEVICE_HELP = "auto (GPU when there is one), cpu, cuda, cuda:N."
PROBE_LAYOUTS_HELP = (
    "Layout of --data: prepared, urban1k, docci, dci, long-dci, coco, flickr30k, flickr30k-full, "
    "sharegpt4v-1k, sharegpt4v-1k-sam."
)
# Named here, where the flags are checked before torch loads (metrics.py and zeroshot.py load it);
# tests/test_options.py keeps them equal to metrics.RULES and zeroshot.TEMPLATE_SETS.
RECALL_RULES = ("pessimistic", "clip_benchmark")
TEMPLATE_SETS = ("openai", "simple")


def check_data(specs: Sequence[DataSpec]) -> None:
    """Cheap facts about --data before any model loads: a prepared folder opens (it exists, has a
    manifest, is whole); a benchmark's file or folder exists."""
    from caption_debias import storage

    for spec in specs:
        if spec.benchmark == "prepared":
            from caption_debias.dataset import PreparedDataset

            PreparedDataset.open(spec.path)
        elif not storage.is_url(str(spec.path)) and not spec.path.exists():
            raise UserError(f"{spec.path}: no such file or folder")


@dataclass(kw_only=True)
class _EncodeOptions(ImageRootOptions, ProgressOptions):
    """What eval and probe share: how the models encode."""

    batch_size: int = option(64, "Images per encoding batch (texts use at least 64).", min=1)
    context_length: int | None = option(
        None, "Text context length for open_clip model names (run folders and checkpoints keep their own).", min=2
    )
    pretrained: str | None = option(
        None,
        "open_clip pretrained tag or weights file for a model name; the architecture name for a bare checkpoint file.",
    )
    device: str = option("auto", DEVICE_HELP)
    segmenter: str = option(
        "fast",
        "Sentence splitter for benchmark captions: fast, pysbd or spacy (prepared folders keep their sentences).",
        choices=SEGMENTERS,
    )

    def check(self) -> None:
        self.check_image_root(urls=True)  # a prepared folder's images may be on a store (image_source)
        check_device_name(self.device)


@dataclass
class EvalOptions(_EncodeOptions):
    """Every option of `caption-debias eval` (the CLI reads defaults and --help from here)."""

    benchmark: list[str] = option(
        [],
        "Benchmark layout of the matching --data: urban1k, docci, dci, long-dci, coco, flickr30k, flickr30k-full, "
        "sharegpt4v-1k (first 1,000 records), sharegpt4v-1k-sam (first 1,000 SAM records), imagefolder "
        "(zero-shot classification), prepared. Repeat in pairs with --data; omit for prepared folders.",
        flags=("--benchmark", "-b"),
    )
    data: list[str] = option(
        [], "Benchmark root/file in its public layout, or a prepared folder. Repeatable.", flags=("--data", "-d")
    )
    variants: str = option(
        "keep", "Comma-separated caption variants: keep, remove, move, swap2, first2, first, filler:N."
    )
    templates: str = option(
        "openai", "Zero-shot prompt templates: openai (80 ImageNet templates) or simple.", choices=TEMPLATE_SETS
    )
    recall_rule: str = option(
        "pessimistic",
        "How tied scores count: pessimistic (against the query) or clip_benchmark (torch.topk, as "
        "CLIP_benchmark); named in the JSON.",
        choices=RECALL_RULES,
    )

    def variant_names(self) -> list[str]:
        """--variants as a list of checked names (UserError on an unknown one)."""
        from caption_debias.evaluate.variants import parse_variants

        return parse_variants(self.variants)

    def data_specs(self) -> list[DataSpec]:
        """--benchmark/--data paired (UserError on a count mismatch, an unknown layout, a name given twice)."""
        from caption_debias.evaluate.suite import pair_data

        return pair_data(list(self.benchmark), list(self.data), self.image_root)

    def check(self) -> None:
        self.variant_names()
        check_data(self.data_specs())
        super().check()


@dataclass
class ProbeOptions(_EncodeOptions):
    """Every option of `caption-debias probe` (the CLI reads defaults and --help from here)."""

    data: str = required(
        "A prepared folder, or a benchmark layout with --benchmark (the paper uses DOCCI test).", flags=("--data", "-d")
    )
    benchmark: str = option("prepared", PROBE_LAYOUTS_HELP, flags=("--benchmark", "-b"))

    def data_spec(self) -> DataSpec:
        """--data read as --benchmark says (UserError on an unknown layout)."""
        from caption_debias.evaluate.suite import pair_data

        (spec,) = pair_data([self.benchmark], [self.data], self.image_root)
        return spec

    def check(self) -> None:
        check_data([self.data_spec()])
        super().check()
