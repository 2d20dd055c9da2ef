"""curate's row rules as other stages apply them: view's threshold preview, map and neighbours decide
with these very functions, so the page and a curate run cannot disagree. One public door to them, so
the modules behind it (signals, dedup, quality, semdedup, writer) stay curate's own."""

from caption_debias.curate.dedup import low_alignment
from caption_debias.curate.options import default_of
from caption_debias.curate.quality import is_repetitive, signals_batch
from caption_debias.curate.semdedup import centred, clusters_of, semantic_duplicates
from caption_debias.curate.signals import (
    TEXT_BATCH,
    bad_embeddings,
    embedding_width,
    problem_column,
    score_signals,
)
from caption_debias.curate.writer import mask_counts, sentence_keep

__all__ = [
    "TEXT_BATCH",
    "bad_embeddings",
    "centred",
    "clusters_of",
    "default_of",
    "embedding_width",
    "is_repetitive",
    "low_alignment",
    "mask_counts",
    "problem_column",
    "score_signals",
    "semantic_duplicates",
    "sentence_keep",
    "signals_batch",
]
