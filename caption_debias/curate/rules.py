"""curate's row rules as other stages apply them: view's threshold preview, map and neighbours decide
with these very functions, so the page and a curate run cannot disagree. One public door to them, so
the modules behind it (signals, dedup, writer) stay curate's own."""

from caption_debias.curate.dedup import low_alignment
from caption_debias.curate.signals import bad_embeddings, embedding_width, problem_column, score_signals
from caption_debias.curate.writer import mask_counts, sentence_keep

__all__ = [
    "bad_embeddings",
    "embedding_width",
    "low_alignment",
    "mask_counts",
    "problem_column",
    "score_signals",
    "sentence_keep",
]
