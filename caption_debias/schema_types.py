"""TypedDicts of the JSON files a folder holds, derived from schemas/*.json. Do not edit: written by
`python -m caption_debias.schema_codegen > caption_debias/schema_types.py` (tests/test_schema_types.py).

Each class lists a schema's properties; the required ones in a base class, the others optional
(`total=False`); keys a schema leaves open (options, detail) are dicts of Any.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class _ManifestCountsRequired(TypedDict):
    """ManifestCounts's required keys."""

    read: int
    written: int


class ManifestCounts(_ManifestCountsRequired, total=False):
    """Totals over all inputs."""

    rejected: int
    duplicate_keys: int
    rejects_by_reason: dict[str, int]
    removed: int
    removed_by_reason: dict[str, int]


class _ManifestInputsItemRequired(TypedDict):
    """ManifestInputsItem's required keys."""

    path: str
    format: str
    read: int
    written: int
    complete: bool


class ManifestInputsItem(_ManifestInputsItemRequired, total=False):
    """One item of ManifestInputs's list."""

    rejected: int
    removed: int
    kind: Literal["prepared", "curated"]
    manifest_sha256: str
    rows: int
    image_root: str


class ManifestShardsItem(TypedDict):
    """One item of ManifestShards's list."""

    path: str
    rows: int
    sha256: str


class ManifestScoringModel(TypedDict):
    """The model's identity: name, spec as given, pretrained, weights_sha256 (of the state dict as loaded), context_length, embed_dim, where the weights came from."""

    weights_sha256: str
    context_length: int


class ManifestScoring(TypedDict):
    """score (and curate of a scored folder, carried): the model (name, spec, pretrained, weights_sha256, context_length, embed_dim), device, precision, batch_size, captions_over_context, sentences_over_context, the reference sample and the grounding rule (docs/curation.md, Model signals)."""

    model: ManifestScoringModel
    captions_over_context: int


class _ManifestCurationFunnelItemRequired(TypedDict):
    """ManifestCurationFunnelItem's required keys."""

    step: str


class ManifestCurationFunnelItem(_ManifestCurationFunnelItemRequired, total=False):
    """One item of ManifestCurationFunnel's list."""

    rows: int
    removed: int
    left: int


class ManifestCurationSentenceKeep(TypedDict):
    """Present when the written rows carry a sentence_keep mask (curate --drop-ungrounded, or a mask carried from the input): threshold (--drop-ungrounded; null when the input's mask was kept), rows (written rows with a mask), rows_masked (of those, rows with at least one sentence marked not kept), sentences (in the rows with a mask), sentences_masked (marked not kept: never trained on, packed or exported), rows_removed (ungrounded_caption: no detail sentence left)."""

    threshold: float | None
    rows: int
    rows_masked: int
    sentences: int
    sentences_masked: int
    rows_removed: int


class ManifestCurationKeptByUser(TypedDict, total=False):
    """Present when --keep-keys was given: rows (listed rows written), overrode (reason -> listed rows that reason would have removed), not_kept (reason -> listed rows that went all the same: a missing or unreadable image)."""

    rows: int
    overrode: dict[str, int]
    not_kept: dict[str, int]


class ManifestCurationLowAlignment(TypedDict, total=False):
    """Present when --min-clip-score or --keep-top-alignment was given: min_clip_score, keep_top_alignment (P), kept_by_rank (ceil(P% of rows)) and cutoff (the clip_score of the last row kept by rank: where --keep-top-alignment cut)."""

    min_clip_score: float
    keep_top_alignment: float
    kept_by_rank: int
    cutoff: float


class _ManifestCurationRequired(TypedDict):
    """ManifestCuration's required keys."""

    thresholds: dict[str, Any]
    funnel: list[ManifestCurationFunnelItem]
    decontaminate: list[dict[str, Any]]
    image_coverage: dict[str, dict[str, Any]] | None


class ManifestCuration(_ManifestCurationRequired, total=False):
    """curate only: how the folder was curated (docs/curation.md)."""

    sentence_keep: ManifestCurationSentenceKeep
    kept_by_user: ManifestCurationKeptByUser
    low_alignment: ManifestCurationLowAlignment


class ManifestImages(TypedDict, total=False):
    """curate, score and pack: the image root the run read under (`root`: absolute, or a URL; null when none was given or recorded) and whether images were opened at all (`opened`: false means no image was checked), with `checked`, `missing`, `unreadable` counts and the `max_missing_images` share that stops a run."""

    root: str | None
    opened: bool
    checked: int
    missing: int
    unreadable: int
    max_missing_images: float


class _ManifestRequired(TypedDict):
    """Manifest's required keys."""

    schema_version: int
    complete: bool
    counts: ManifestCounts
    inputs: list[ManifestInputsItem]
    shards: list[ManifestShardsItem]
    options: dict[str, Any]
    tokenizer: dict[str, Any]
    segmenter: dict[str, Any]
    toolkit_version: str


class Manifest(_ManifestRequired, total=False):
    """caption-debias manifest (OUT/manifest.json of a prepared or curated folder)."""

    limit: int
    summary: dict[str, Any]
    created: str
    elapsed_s: float
    scoring: ManifestScoring
    curation: ManifestCuration
    scored_from: list[str]
    images: ManifestImages


class RejectLine(TypedDict):
    """caption-debias reject (one line of OUT/rejects.jsonl)."""

    input: str
    location: int | str
    reason: str
    record: str


class RemovedLine(TypedDict):
    """caption-debias removal (one line of OUT/removed.jsonl of a curated folder)."""

    key: str
    reason: Literal["image_missing", "image_unreadable", "image_too_small", "eval_overlap", "repetitive_caption", "truncated_caption", "invalid_signal", "low_alignment", "ungrounded_caption", "duplicate_image", "duplicate_caption", "near_duplicate_caption", "semantic_duplicate", "excluded_by_user"]  # fmt: skip
    detail: dict[str, Any]
    image: str
    caption: str
    input: str


class _TaskSidecarRequired(TypedDict):
    """TaskSidecar's required keys."""

    index: int
    fingerprint: str
    rows: int
    sha256: str | None
    bytes: int | None


class TaskSidecar(_TaskSidecarRequired, total=False):
    """caption-debias task sidecar (OUT/.<stage>/.../part-NNNNN.json: one finished task's completion record)."""

    path: str | None
