"""Options of a curate run (the CLI's flags), the reasons in funnel order, and the fixed thresholds."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from caption_debias.errors import UserError
from caption_debias.options import MissingImagesOptions, StageOptions, field_default, option

if TYPE_CHECKING:
    from caption_debias.curate.keys import KeyList

# Funnel order: a row removed for an earlier reason is never tested for a later one, and
# "an earlier kept row" of the duplicate reasons means a row that passed every reason before.
REASONS = (
    "image_missing",
    "image_unreadable",
    "image_too_small",
    "eval_overlap",
    "repetitive_caption",
    "truncated_caption",
    "invalid_signal",  # a score column this run reads holds what score never writes (NaN, inf, 1e30, ...)
    "low_alignment",  # model scores (a scored folder, docs/curation.md): row-local, so before the duplicates
    "ungrounded_caption",
    "duplicate_image",
    "duplicate_caption",
    "near_duplicate_caption",
    "semantic_duplicate",  # an exact or near-exact duplicate is reported as such, not as a semantic one
    # last: a curator's choice by key (curate/keys.py) removes only rows every other reason kept, so the
    # output is the run's without the flag less exactly those rows
    "excluded_by_user",
)
# Reasons a curator decides by listing keys (--exclude-keys, --include-keys).
USER_REASONS = ("excluded_by_user",)
# Reasons that read the columns `caption-debias score` writes.
MODEL_REASONS = ("invalid_signal", "low_alignment", "ungrounded_caption", "semantic_duplicate")

# Thresholds that are not flags; all recorded in the manifest (docs/curation.md, measured in
# docs/benchmarks.md). Changing one changes the output, so they are part of the run's shape.
SHINGLE_TOKENS = 3  # caption n-grams for MinHash: 3 CLIP tokens (about 3 words)
NUM_PERM = 160  # MinHash permutations: an estimate's standard deviation is sqrt(J(1-J)/160), 0.03 at J = 0.8
LSH_MISS_AT_THRESHOLD = 0.01  # the LSH bands may miss at most 1% of the pairs right at the threshold
REPETITION_NGRAM = 4  # caption_repetition counts tokens inside repeated 4-grams
REPEATED_SENTENCE_MIN_TOKENS = 3  # shorter sentences ("Yes.") may repeat legitimately
# ... or when the caption ends in a loop: 3+ back-to-back copies of one span of up to 32 tokens
# (a generator stuck until its length limit; a longer span is a sentence, counted above)
TAIL_LOOP_MIN_COPIES = 3
TAIL_LOOP_MAX_PERIOD = 32


def lsh_params(threshold: float) -> tuple[int, int]:
    """(bands, rows per band) of the LSH for a Jaccard threshold t.

    A pair of Jaccard J shares a band of r minima with probability J^r, so it becomes a
    candidate with probability 1 - (1 - J^r)^b. The most rows per band (the fewest candidate
    pairs below t to verify) whose NUM_PERM // r bands still make a pair at t a candidate
    with probability >= 1 - LSH_MISS_AT_THRESHOLD; pairs above t are candidates more often.
    t = 0.8: 22 bands of 7 rows (0.994 at 0.8, 0.16 at 0.5, 0.005 at 0.3).
    """
    for rows in range(NUM_PERM, 0, -1):
        bands = NUM_PERM // rows
        if 1 - (1 - threshold**rows) ** bands >= 1 - LSH_MISS_AT_THRESHOLD:
            return bands, rows
    return NUM_PERM, 1


# A perceptual-hash match between two small or flat images needs a second signal (docs/curation.md):
# such pictures collide in a 64-bit DCT hash although they differ (icons, charts, synthetic scenes).
SMALL_IMAGE_SIDE = 128  # shorter side below this (pixels): small
FLAT_SHARE = 0.5  # flat: this share of the 32 x 32 grey thumbnail within 8 levels of its most common level
THUMB_SIDE = 8  # the confirming signal: 8 x 8 RGB thumbnails (box-filtered) ...
THUMB_MAX_DIFF = 32  # ... that differ by at most this many levels in every channel of every pixel
# SemDeDup (semantic_duplicate): spherical k-means on the image embeddings, then the pairs within each
# row's home cluster and between a row and the home it is second nearest to (semdedup.PROBES).
SEMDEDUP_CLUSTER_SIZE = 1000  # mean rows per cluster up to 1M rows (sqrt(rows) clusters beyond: semdedup.cluster_count)
SEMDEDUP_TRAIN_ROWS = 100_000  # k-means is fitted on a seeded sample of this many rows, then every row assigned
SEMDEDUP_ITERATIONS = 10  # Lloyd iterations of the fit
SEMDEDUP_SEED = 0
SEMDEDUP_PROBES = 2  # clusters a row is looked up in: its home and the next nearest


@dataclass
class CurateOptions(MissingImagesOptions, StageOptions):
    """Every option of `caption-debias curate` (the CLI reads defaults and --help from here)."""

    decontaminate: list[str] = option(
        [],
        "NAME=PATH of an eval set (any `eval --benchmark` name and its layout); repeatable. "
        "Its images and captions are removed from the output.",
    )
    near_duplicate_threshold: float = option(
        0.8,
        "Estimated Jaccard similarity of caption n-gram sets that makes a near-duplicate.",
        min=0.0,
        max=1.0,
        min_open=True,
    )
    keep_duplicate_images: bool = option(
        False, "Keep every caption of a repeated image (identical image-caption pairs still go)."
    )
    min_image_side: int = option(32, "Remove images whose shorter side is below this (pixels).", min=0)
    embed_images: bool = option(
        False, "Also store each kept image's bytes in the shards (image_bytes); needs --image-root."
    )
    duplicate_image_distance: int = option(
        4,
        "Perceptual-hash Hamming distance (of 64 bits) at or below which two images are one picture "
        "(two small or flat images also need matching 8 x 8 thumbnails).",
        min=0,
        max=63,
    )
    repetition_max: float = option(
        0.5,
        "repetitive_caption when more than this fraction of the caption's tokens sit in repeated 4-grams.",
        min=0.0,
        max=1.0,
        min_open=True,
    )
    repeated_sentences_max: int = option(
        0, "repetitive_caption when more sentences (of 3+ tokens) than this repeat an earlier one.", min=0
    )
    min_clip_score: float | None = option(
        None, "low_alignment below this clip_score (a scored folder: `caption-debias score`)."
    )
    keep_top_alignment: float | None = option(
        None,
        "low_alignment outside the top P percent of clip_score over the whole input (DataComp's rule; ties by input order).",
        min=0.0,
        max=100.0,
        min_open=True,
        metavar="P",
    )
    drop_ungrounded: float | None = option(
        None,
        "Mark sentences with sentence_grounding below this as not kept (sentence_keep); a caption left with no "
        "non-summary sentence goes as ungrounded_caption.",
        metavar="T",
    )
    score_model: str | None = option(
        None,
        "Score the inputs first with this model (any `score --model` spec) into OUT/.curate/scored, then curate "
        "that: the model flags then need no scored folder.",
        metavar="SPEC",
    )
    score_pretrained: str | None = option(None, "With --score-model: its pretrained tag or checkpoint file.")
    score_device: str = option("cpu", "With --score-model: cpu or cuda.", choices=("cpu", "cuda"), runtime=True)
    semantic_duplicate_threshold: float | None = option(
        None,
        "semantic_duplicate at image-embedding cosine at or above this with an earlier kept row "
        "(SemDeDup; needs `score --keep-embeddings`).",
        min=0.0,
        max=1.0,
        min_open=True,
    )
    semantic_duplicate_center: bool = option(
        True,
        "Compare image embeddings centred (less their mean over the compared rows, renormalised), so the "
        "threshold means the same for a fine-tuned model whose embeddings crowd into a cone; "
        "--no-semantic-duplicate-center: raw cosine, as SemDeDup published.",
        flags=("--semantic-duplicate-center/--no-semantic-duplicate-center",),
    )
    exclude_keys: str | None = option(
        None,
        "Remove the rows whose key is listed in this file (one key a line, as it stands or as a JSON string, as "
        "`caption-debias view` exports a selection) as excluded_by_user, the funnel's last reason; the manifest "
        "records the file's sha256.",
        metavar="FILE",
    )
    include_keys: str | None = option(
        None,
        "Keep only the rows whose key is listed in this file (the others go as excluded_by_user); the rows "
        "listed still pass every other reason.",
        metavar="FILE",
    )
    keep_keys: str | None = option(
        None,
        "Keep the rows whose key is listed in this file whatever a filter says (duplicates, thresholds, text "
        "quality, eval leaks, --include-keys), their sentences unmasked: what a filter got wrong. A missing or "
        "unreadable image still goes. The manifest records the file's sha256 and what each reason would have "
        "removed.",
        metavar="FILE",
    )
    max_in_flight: int = option(2, "Shards queued or in work per worker.", min=1, runtime=True)
    image_threads: int = option(
        4, "File reads in flight per worker (image I/O overlaps decoding).", min=1, runtime=True
    )

    def check(self) -> None:
        self.check_image_root(urls=True)  # read through image_source: a folder here or an fsspec URL
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

        self.key_lists()  # a keys file missing, not UTF-8, huge, empty: one line now

    def key_lists(self) -> dict[str, KeyList]:
        """The key files given, read (curate/keys.py). A run reads them once, at its start, and hands
        that reading to everything after it (thresholds, the check against the inputs, the decision)."""
        if self.exclude_keys is None and self.include_keys is None and self.keep_keys is None:
            return {}
        from caption_debias.curate import keys

        return keys.lists(self.exclude_keys, self.include_keys, self.keep_keys)

    def user_keys(self, key_lists: dict[str, KeyList] | None = None) -> dict[str, Any] | None:
        """The key files given (path, sha256, keys), recorded with the thresholds: another file is another
        run. `key_lists`: the run's reading of them (read here when not given)."""
        if self.exclude_keys is None and self.include_keys is None and self.keep_keys is None:
            return None
        given = self.key_lists() if key_lists is None else key_lists
        return {role: k.record() for role, k in given.items()}

    def lsh(self) -> tuple[int, int]:
        """(bands, rows per band) for this run's --near-duplicate-threshold."""
        return lsh_params(self.near_duplicate_threshold)

    def scores_needed(self) -> dict[str, str]:
        """Score column -> the flag that needs it (a folder without them fails in one line)."""
        need = {}
        if self.min_clip_score is not None or self.keep_top_alignment is not None:
            need["clip_score"] = "--min-clip-score" if self.min_clip_score is not None else "--keep-top-alignment"
        if self.drop_ungrounded is not None:
            need["sentence_grounding"] = "--drop-ungrounded"
        if self.semantic_duplicate_threshold is not None:
            need["image_embedding"] = "--semantic-duplicate-threshold"
        return need

    def thresholds(self, key_lists: dict[str, KeyList] | None = None) -> dict[str, Any]:
        """Every threshold that decides a reason (recorded in the manifest); `key_lists` as for user_keys."""
        user_keys = self.user_keys(key_lists)
        return {
            "min_image_side": self.min_image_side,
            "phash_hamming_max": self.duplicate_image_distance,
            "phash_confirm": {
                "small_side_below": SMALL_IMAGE_SIDE,
                "flat_share_of_one_grey_level": FLAT_SHARE,
                "thumb_side": THUMB_SIDE,
                "thumb_max_diff": THUMB_MAX_DIFF,
            },
            "duplicate_images": not self.keep_duplicate_images,
            "near_duplicate_jaccard": self.near_duplicate_threshold,
            "minhash": {
                "shingle": f"{SHINGLE_TOKENS} CLIP tokens",
                "num_perm": NUM_PERM,
                "bands": self.lsh()[0],
                "rows_per_band": self.lsh()[1],
                "lsh_miss_at_threshold_max": LSH_MISS_AT_THRESHOLD,
                "library": "rensa RMinHash",
            },
            "repetition": {
                "ngram_tokens": REPETITION_NGRAM,
                "caption_repetition_max": self.repetition_max,
                "repeated_sentences_max": self.repeated_sentences_max,
                "repeated_sentence_min_tokens": REPEATED_SENTENCE_MIN_TOKENS,
                "tail_loop_min_copies": TAIL_LOOP_MIN_COPIES,
                "tail_loop_max_period_tokens": TAIL_LOOP_MAX_PERIOD,
            },
            "truncation": "caption_truncated (see docs/curation.md)",
            "min_clip_score": self.min_clip_score,
            "keep_top_alignment_percent": self.keep_top_alignment,
            "drop_ungrounded": self.drop_ungrounded,
            "semantic_duplicate": None
            if self.semantic_duplicate_threshold is None
            else {
                "cosine_min": self.semantic_duplicate_threshold,
                "centred": self.semantic_duplicate_center,
                "clusters": f"min(rows / {SEMDEDUP_CLUSTER_SIZE}, sqrt(rows))",
                "train_rows": SEMDEDUP_TRAIN_ROWS,
                "iterations": SEMDEDUP_ITERATIONS,
                "seed": SEMDEDUP_SEED,
                "probes": SEMDEDUP_PROBES,
            },
            # only when given: a run without key files records (and resumes with) the same thresholds as before
            **({"user_keys": user_keys} if user_keys is not None else {}),
        }

    def output_shaping(self, key_lists: dict[str, KeyList] | None = None) -> dict[str, Any]:
        shaping = super().output_shaping()
        shaping["thresholds"] = self.thresholds(key_lists)
        return shaping


def default_of(name: str) -> Any:
    """The default of CurateOptions field `name` (for code that takes a threshold or None)."""
    return field_default({f.name: f for f in fields(CurateOptions)}[name])
