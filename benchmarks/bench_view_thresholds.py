"""The cost of view's semantic-duplicate preview (view/thresholds.py) on a generated folder.

A folder of ROWS rows with DIM-d float16 image embeddings around 12 centres (tests/view_fixtures.py
embedding_folder: random data, the cost, not the meaning), then three previews timed in one process:
the first (the signal columns read), the first semantic one (embeddings read, centred, clustered by
curate's k-means, pairs) and a second threshold (the clusters reused: one pass over the pairs).
Prints wall and CPU seconds of each and the peak RSS.

    nice .venv/bin/python benchmarks/bench_view_thresholds.py 100000 512
"""

from __future__ import annotations

import resource
import shutil
import sys
import time
from pathlib import Path

import _common  # noqa: F401  (train_fixtures and view_fixtures importable)
import numpy as np


def main(rows: int, dim: int, work: Path) -> None:
    from train_fixtures import make_prepared
    from view_fixtures import embedding_folder

    from caption_debias.view.data import ViewData

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    src, _ = make_prepared(work, n=8)
    folder = embedding_folder(src, work / "emb", rows=rows, dim=dim, rng=np.random.default_rng(0))
    th = ViewData([str(folder)]).current().thresholds

    def timed(label: str, **cuts) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        body = th.preview(cuts)
        print(
            f"{label}: wall {time.perf_counter() - wall:.1f} s, cpu {time.process_time() - cpu:.1f} s, {body['removed']}"
        )

    # repetition_max 1.0: the folder's rows repeat 8 captions, so no text rule removes them first
    timed("first preview (signals read)", repetition_max=1.0)
    timed("semantic 0.9, first (read, centred, clustered)", repetition_max=1.0, semantic_duplicate_threshold=0.9)
    timed("semantic 0.95 (clusters reused)", repetition_max=1.0, semantic_duplicate_threshold=0.95)
    print("peak RSS MiB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3] if len(sys.argv) > 3 else "/tmp/view-thresholds-bench"))
