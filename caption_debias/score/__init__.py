"""`caption-debias score`: model signals per row (clip_score, sentence_scores, sentence_grounding).

A pipeline of small steps:

  options   ScoreOptions: every flag's default and help
  inputs    prepared/curated folders -> ordered shards, lineage, image roots, the reference draw
  encode    any model spec loaded once per process; images (threaded decode ahead of the model)
            and stored-id texts -> normalised embeddings
  signals   the three signals from embeddings: a one-row rule and its batched path
  writer    the scored table: input columns untouched, score columns filled
  shard     the map step: one input shard -> one scored shard + sidecar (a worker or a Ray actor)
  manifest  the folder's manifest: counts, lineage, the model's identity, the reference sample
  run       score_folder(): lock, resume, reference sample, the map (on the stage runner and an
            engine: the local pool, or a Ray actor pool holding the model once per actor), removed.jsonl, manifest
"""

import os

# MKL's strict conditional numerical reproducibility: the same bits for any number of threads,
# so a shard's scores do not depend on --workers (each worker has cores / workers threads).
# MKL reads it at its first call: set here, before this package runs torch.
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

from caption_debias.api import make_callable  # noqa: E402  (after MKL_CBWR: it must be set first)

make_callable(__name__)  # caption_debias.score(...) runs the stage: score/api.py
