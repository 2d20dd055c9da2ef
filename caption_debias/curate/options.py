"""Options of a curate run (the CLI's flags), the reasons in funnel order, and the fixed thresholds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# Funnel order: a row removed for an earlier reason is never tested for a later one, and
# "an earlier kept row" of the duplicate reasons means a row that passed every reason before.
REASONS = (
    "image_missing",
    "image_unreadable",
    "image_too_small",
    "eval_overlap",
    "repetitive_caption",
    "truncated_caption",
    "duplicate_image",
    "duplicate_caption",
    "near_duplicate_caption",
)

# Thresholds that are not flags; all recorded in the manifest (docs/curation.md, measured in
# docs/benchmarks.md). Changing one changes the output, so they are part of the run's shape.
SHINGLE_TOKENS = 3  # caption n-grams for MinHash: 3 CLIP tokens (about 3 words)
LSH_BANDS = 20  # 20 bands of 8 rows: pairs at Jaccard 0.8 share a band with p = 0.975, at 0.3 with p = 1e-3
ROWS_PER_BAND = 8  # ... and every candidate is then verified on the whole signature
NUM_PERM = LSH_BANDS * ROWS_PER_BAND
PHASH_DISTANCE = 4  # Hamming distance (of 64 bits) at or below which two images are one picture
REPETITION_NGRAM = 4  # caption_repetition counts tokens inside repeated 4-grams
REPETITION_MAX = 0.35  # repetitive_caption when caption_repetition is above this
REPEATED_SENTENCES_MAX = 0  # ... or when more sentences than this repeat an earlier one
REPEATED_SENTENCE_MIN_TOKENS = 3  # shorter sentences ("Yes.") may repeat legitimately
# ... or when the caption ends in a loop: 3+ back-to-back copies of one span of up to 32 tokens
# (a generator stuck until its length limit; a longer span is a sentence, counted above)
TAIL_LOOP_MIN_COPIES = 3
TAIL_LOOP_MAX_PERIOD = 32
ENGINES = ("local", "ray")
RUNTIME_ONLY = frozenset({"workers", "overwrite", "quiet", "engine", "ray_address", "max_in_flight", "image_threads"})


@dataclass
class CurateOptions:
    image_root: str | None = None
    decontaminate: list[str] = field(default_factory=list)  # NAME=PATH
    near_duplicate_threshold: float = 0.8
    keep_duplicate_images: bool = False
    min_image_side: int = 32
    embed_images: bool = False
    workers: int = 1
    engine: str = "local"
    ray_address: str | None = None
    overwrite: bool = False
    quiet: bool = False
    max_in_flight: int = 2  # shards queued or in work per worker
    image_threads: int = 4  # file reads in flight per worker (image I/O overlaps decoding)

    def validate(self) -> None:
        from caption_debias.errors import UserError

        if not 0.0 < self.near_duplicate_threshold <= 1.0:
            raise UserError(f"--near-duplicate-threshold must be in (0, 1] (got {self.near_duplicate_threshold})")
        if self.min_image_side < 0:
            raise UserError(f"--min-image-side must be at least 0 (got {self.min_image_side})")
        if self.workers < 1:
            raise UserError(f"--workers must be at least 1 (got {self.workers})")
        if self.engine not in ENGINES:
            raise UserError(f"unknown engine {self.engine!r} (choose from {', '.join(ENGINES)})")
        if self.image_root is not None and not Path(self.image_root).is_dir():
            raise UserError(f"--image-root {self.image_root}: no such folder")
        if self.embed_images and self.image_root is None:
            raise UserError("--embed-images needs --image-root")
        for spec in self.decontaminate:
            name, sep, path = spec.partition("=")
            if not sep or not name or not path:
                raise UserError(f"--decontaminate {spec!r}: expected NAME=PATH (e.g. urban1k=/data/Urban1k)")
            from caption_debias.evaluate.benchmarks import BENCHMARKS

            if name not in BENCHMARKS:
                raise UserError(
                    f"--decontaminate {spec!r}: unknown eval set {name!r} (choose from {', '.join(BENCHMARKS)})"
                )
            if not Path(path).exists():
                raise UserError(f"--decontaminate {spec!r}: {path}: no such file or folder")

    def thresholds(self) -> dict[str, Any]:
        """Every threshold that decides a reason (recorded in the manifest)."""
        return {
            "min_image_side": self.min_image_side,
            "phash_hamming_max": PHASH_DISTANCE,
            "duplicate_images": not self.keep_duplicate_images,
            "near_duplicate_jaccard": self.near_duplicate_threshold,
            "minhash": {
                "shingle": f"{SHINGLE_TOKENS} CLIP tokens",
                "num_perm": NUM_PERM,
                "bands": LSH_BANDS,
                "rows_per_band": ROWS_PER_BAND,
                "library": "rensa RMinHash",
            },
            "repetition": {
                "ngram_tokens": REPETITION_NGRAM,
                "caption_repetition_max": REPETITION_MAX,
                "repeated_sentences_max": REPEATED_SENTENCES_MAX,
                "repeated_sentence_min_tokens": REPEATED_SENTENCE_MIN_TOKENS,
                "tail_loop_min_copies": TAIL_LOOP_MIN_COPIES,
                "tail_loop_max_period_tokens": TAIL_LOOP_MAX_PERIOD,
            },
            "truncation": "caption_truncated (see docs/curation.md)",
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def output_shaping(self) -> dict[str, Any]:
        shaping = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in RUNTIME_ONLY}
        shaping["thresholds"] = self.thresholds()
        return shaping
