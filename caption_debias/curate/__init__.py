"""`caption-debias curate`: prepared folders in, a curated folder (same contract) plus removed.jsonl out.

A pipeline of small steps, datatrove-style. Each step module holds the rule for one row or
one pair as plain Python (the specification, used by the tests) and a batched path that
computes the same thing for a whole shard or the whole run:

  inputs      prepared/curated folders -> ordered shard tasks, lineage (manifest sha256)
  images      image facts per file: missing / unreadable / size / sha256 / perceptual hash
  quality     caption signals: repeated sentences, duplicated n-gram fraction, truncation
  minhash     token n-gram MinHash signatures and LSH band keys (rensa)
  signals     the map step: one input shard -> one signals file (+ sidecar), in parallel
  decontaminate  eval sets read by evaluate.benchmarks -> the same signals
  dedup       the global step: every reason decided in funnel order (polars group-bys)
  writer      the write step: one input shard -> its kept rows + new columns, in parallel
  run         wires them together (lock, resume, manifest, removed.jsonl, summary)
"""

from caption_debias.api import make_callable

make_callable(__name__)  # caption_debias.curate(...) runs the stage: curate/api.py
