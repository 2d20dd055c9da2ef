"""ScoreOptions: every option of `caption-debias score`, the one source of defaults and help.

The CLI (cli/score_cmd.py) reads each flag's default and help text from these fields, as
`train` reads TrainConfig's. Options that change the output (the model, the reference
sample, the precision, ...) are the run's shape: a resumed run must match them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from caption_debias import storage
from caption_debias.errors import UserError
from caption_debias.options import option

DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "bf16", "amp")
ENGINES = ("local", "ray")
REASONS = ("image_missing", "image_unreadable")  # a row is removed only when its image cannot be encoded
GROUNDING_EPS = 1e-6  # added to the reference similarities' standard deviation (a constant sentence)


@dataclass
class ScoreOptions:
    model: str = option(
        "ViT-B-16",
        "demo-start (the shipped small model, trained), an open_clip model name with --pretrained (without it: "
        "random weights, e.g. the default), local-dir:DIR, hf-hub:ORG/REPO, a checkpoint file, or a `train` run folder.",
    )
    pretrained: str | None = option(
        None, "Pretrained tag (e.g. openai) or checkpoint file; for a checkpoint-file --model, its architecture name."
    )
    image_root: str | None = option(
        None,
        "Folder the rows' image paths are relative to (default: the one the input's manifest records; "
        "rows with image_bytes need none).",
    )
    batch_size: int = option(64, "Images (and texts) per forward pass.")
    device: str = option("cpu", f"{' | '.join(DEVICES)}.")
    precision: str = option(
        "fp32", "fp32 | bf16 (weights and activations) | amp (autocast: bf16 on CPU, fp16 on CUDA)."
    )
    workers: int = option(
        1, "Worker processes, each with its own copy of the model (output is identical for any value)."
    )
    engine: str = option("local", "local (process pool) or ray (a Ray Data actor pool of the model; same output).")
    ray_address: str | None = option(None, "Ray cluster to join with --engine ray.")
    keep_embeddings: bool = option(
        False,
        "Also store each row's normalised image and caption embeddings (float16): image_embedding, caption_embedding.",
    )
    reference_images: int = option(
        128,
        "Size of the fixed, seeded sample of the input's images each sentence's grounding is measured against.",
    )
    seed: int = option(0, "Seed of the reference sample.")
    draft_decode: bool = option(
        True,
        "Decode a JPEG at the smallest DCT scale still >= the model's input side (Pillow's draft mode; far less "
        "work for large images); --no-draft-decode decodes every pixel, exactly as a plain open_clip loop.",
    )
    decode_threads: int = option(
        2, "Image decoding threads per worker, running ahead of the model (DataLoader-style prefetch)."
    )
    overwrite: bool = option(False, "Delete an earlier run in --out and start over (default: resume it).")
    quiet: bool = option(False, "No progress lines and no summary.")
    log_interval: float = option(30.0, "Seconds between plain progress lines when stderr is not a terminal.")
    max_in_flight: int = option(2, "Shards queued or in work per worker.")

    def validate(self) -> None:
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.reference_images < 2:
            raise UserError(f"--reference-images must be at least 2 (got {self.reference_images})")
        if self.decode_threads < 1:
            raise UserError(f"--decode-threads must be at least 1 (got {self.decode_threads})")
        if self.device not in DEVICES:
            raise UserError(f"unknown --device {self.device!r} (choose from {', '.join(DEVICES)})")
        if self.precision not in PRECISIONS:
            raise UserError(f"unknown --precision {self.precision!r} (choose from {', '.join(PRECISIONS)})")
        if self.engine not in ENGINES:
            raise UserError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        if self.image_root is not None and not storage.is_url(self.image_root) and not Path(self.image_root).is_dir():
            raise UserError(f"--image-root {self.image_root}: no such folder")
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise UserError("--device cuda: no CUDA device is visible to torch")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_shaping(self) -> dict[str, Any]:
        """The options that change the output (a resumed run must have the same)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_ONLY}


# Options that change how fast, not what: a resumed run may change them.
RUNTIME_ONLY = frozenset(
    {"workers", "engine", "ray_address", "overwrite", "quiet", "log_interval", "max_in_flight", "decode_threads"}
)
