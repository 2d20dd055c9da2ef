"""ScoreOptions: every option of `caption-debias score`, the one source of defaults and help.

The CLI (cli/score_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's. Options that change the output (the model, the reference
sample, the precision, ...) are the run's shape: a resumed run must match them.
"""

from __future__ import annotations

from dataclasses import dataclass

from caption_debias.errors import UserError
from caption_debias.options import MissingImagesOptions, StageOptions, option

DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "bf16", "amp")
REASONS = ("image_missing", "image_unreadable")  # a row is removed only when its image cannot be encoded
GROUNDING_EPS = 1e-6  # added to the reference similarities' standard deviation (a constant sentence)


@dataclass
class ScoreOptions(MissingImagesOptions, StageOptions):
    """Every option of `caption-debias score` (the CLI reads defaults and --help from here)."""

    model: str = option(
        "ViT-B-16",
        "demo-start (the shipped small model, trained), an open_clip model name with --pretrained (without it: "
        "random weights, e.g. the default), local-dir:DIR, hf-hub:ORG/REPO, a checkpoint file, or a `train` run folder.",
    )
    pretrained: str | None = option(
        None, "Pretrained tag (e.g. openai) or checkpoint file; for a checkpoint-file --model, its architecture name."
    )
    batch_size: int = option(64, "Images (and texts) per forward pass.", min=1)
    device: str = option("cpu", f"{' | '.join(DEVICES)}.", choices=DEVICES)
    precision: str = option(
        "fp32",
        "fp32 | bf16 (weights and activations) | amp (autocast: bf16 on CPU, fp16 on CUDA).",
        choices=PRECISIONS,
    )
    keep_embeddings: bool = option(
        False,
        "Also store each row's normalised image and caption embeddings (float16): image_embedding, caption_embedding.",
    )
    reference_images: int = option(
        128,
        "Size of the fixed, seeded sample of the input's images each sentence's grounding is measured against.",
        min=2,
    )
    seed: int = option(0, "Seed of the reference sample.")
    draft_decode: bool = option(
        True,
        "Decode a JPEG at the smallest DCT scale still >= the model's input side (Pillow's draft mode; far less "
        "work for large images); --no-draft-decode decodes every pixel, exactly as a plain open_clip loop.",
        flags=("--draft-decode/--no-draft-decode",),
    )
    decode_threads: int = option(
        2,
        "Image decoding threads per worker, running ahead of the model (DataLoader-style prefetch).",
        min=1,
        runtime=True,
    )
    max_in_flight: int = option(2, "Shards queued or in work per worker.", min=1, runtime=True)

    def check(self) -> None:
        self.check_image_root(urls=True)  # the rows' images are read through fsspec
        if self.device == "cuda":  # the one check that imports torch: last
            import torch

            if not torch.cuda.is_available():
                raise UserError("--device cuda: no CUDA device is visible to torch")
